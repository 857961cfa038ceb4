package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// exportGrants starts three masters that export their audit trail to dir
// (files rotated at 1500 bytes, two kept) and has root grant read to 12
// clients, records enough to rotate the file twice. It returns the
// cluster and the last grant's client as a line's args hold it (JSON in
// JSON).
func exportGrants(t *testing.T, dir string) (*secureCluster, string) {
	t.Helper()
	sc, _, ctx, root := startRootCluster(t, Access{AuditFile: &AuditExport{Path: dir, MaxBytes: 1500, Keep: 2}})
	const grants = 12
	for i := range grants {
		if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: fmt.Sprintf("u%d", i), Permission: "read"}); err != nil {
			t.Fatal(err)
		}
	}
	return sc, fmt.Sprintf(`\"u%d\"`, grants-1)
}

// TestAuditFileExport: every master appends each committed record once,
// as a JSON line with snake_case keys, in order, rotating the file past
// its size and keeping the files it is told to.
func TestAuditFileExport(t *testing.T) {
	dir := t.TempDir()
	sc, last := exportGrants(t, dir)
	for _, n := range sc.nodes {
		id := n.srv.b.ID()
		path := filepath.Join(dir, id+".jsonl")
		waitExported(t, id, path, last)
		var ids []string
		for _, f := range []string{path + ".2", path + ".1", path} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("%s: %v (the rotated files are kept)", f, err)
			}
			if len(b) > 1500 {
				t.Fatalf("%s: %d bytes, past the 1500 it rotates at", f, len(b))
			}
			for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
				var m map[string]any
				if err := json.Unmarshal(line, &m); err != nil {
					t.Fatalf("%s: line %q: %v", f, line, err)
				}
				for _, k := range []string{"id", "at_unix_ms", "committed_unix_ms", "principal", "method", "code", "node", "exported_by"} {
					if _, ok := m[k]; !ok {
						t.Fatalf("%s: line %s lacks %q", f, line, k)
					}
				}
				if m["exported_by"] != id || m["code"] == access.AuditPending {
					t.Fatalf("%s: line %s: want exported_by %s, an outcome", f, line, id)
				}
				ids = append(ids, m["id"].(string))
			}
		}
		for i := 1; i < len(ids); i++ {
			a, _ := access.AuditKeyOf(ids[i-1])
			b, _ := access.AuditKeyOf(ids[i])
			if a >= b {
				t.Fatalf("%s: ids out of order or repeated: %v", id, ids)
			}
		}
		b, _ := os.ReadFile(path)
		if !bytes.Contains(b, []byte(last)) {
			t.Fatalf("%s: the newest file lacks the last grant:\n%s", id, b)
		}
		if _, err := os.Stat(path + ".3"); err == nil {
			t.Fatalf("%s: a third rotated file, keeping 2", id)
		}
	}
}

// A rotation that cannot rename (here Path.2 is a directory holding a
// file, so the second rotation cannot move Path.1 there) must not stop
// the evidence: the file is opened again and grows past its bound, and
// every record still reaches it.
func TestAuditFileOutlivesAFailedRotation(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("m%d.jsonl.2", i), "blocker"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sc, last := exportGrants(t, dir)
	for _, n := range sc.nodes {
		path := filepath.Join(dir, n.srv.b.ID()+".jsonl")
		testwait.For(t, 20*time.Second, path+" holding the last grant past a failed rotation", func() bool {
			b, _ := os.ReadFile(path)
			return bytes.Contains(b, []byte(last))
		})
	}
}

// exportedIDs are the ids of an audit file's lines, failing on a line
// that is not a record.
func exportedIDs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var l access.ExportLine
		if err := json.Unmarshal(line, &l); err != nil || l.ID == "" {
			t.Fatalf("%s: line %q is not a record: %v", path, line, err)
		}
		ids = append(ids, l.ID)
	}
	return ids
}

// TestAuditFileResumesAfterRestart: a master restarted over its audit
// file, whose last line was torn by the crash, cuts the torn line, resumes
// after the last whole one, and writes the records committed while it
// was down: each record once, in order, as the master that never stopped
// wrote them.
func TestAuditFileResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	sc, li, ctx, root := startRootCluster(t, Access{AuditFile: &AuditExport{Path: dir}})
	grant := func(i int) {
		if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: fmt.Sprintf("u%d", i), Permission: "read"}); err != nil {
			t.Fatal(err)
		}
	}
	exported := func(path string, i int) bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte(fmt.Sprintf(`\"u%d\"`, i)))
	}
	for i := range 6 {
		grant(i)
	}
	live := filepath.Join(dir, sc.nodes[li].srv.b.ID()+".jsonl")
	testwait.For(t, 20*time.Second, "the leader exports the sixth grant", func() bool { return exported(live, 5) })

	// The crashed master's file: its lines up to the fourth grant's,
	// then half of the next line.
	b, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.Index(b, []byte(`\"u3\"`))
	end += bytes.IndexByte(b[end:], '\n') + 1
	torn := b[end : end+bytes.IndexByte(b[end:], '\n')/2]
	crashed := filepath.Join(t.TempDir(), "crashed.jsonl")
	if err := os.WriteFile(crashed, append(slices.Clip(b[:end]), torn...), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 6; i < 9; i++ { // committed while it was down
		grant(i)
	}
	testwait.For(t, 20*time.Second, "the leader exports the last grant", func() bool { return exported(live, 8) })

	e, err := newAuditExporter(sc.nodes[li].srv, AuditExport{Path: crashed})
	if err != nil {
		t.Fatalf("restarting over a torn file: %v", err)
	}
	defer e.Close()
	testwait.For(t, 20*time.Second, "the restarted exporter catches up", func() bool {
		if err := e.Export(); err != nil {
			t.Fatal(err)
		}
		return exported(crashed, 8)
	})
	want, got := exportedIDs(t, live), exportedIDs(t, crashed)
	if !slices.Equal(got, want[:len(got)]) || len(got) < len(want)-2 {
		t.Fatalf("restarted file's ids:\n%v\nwant those of the master that never stopped:\n%v", got, want)
	}
}

// TestAuditFileKeepsWhatPruningDrops: a caller's refusal pushed out of
// the trail by its own flood of refusals at once, before any export
// could have read it, is still in every master's file, and each file
// holds every record its master committed: no id of a term is missing
// up to its last.
func TestAuditFileKeepsWhatPruningDrops(t *testing.T) {
	dir := t.TempDir()
	sc, li, ctx, root := startRootCluster(t, Access{AuditFile: &AuditExport{Path: dir},
		AuditMaxRefusedPerCaller: 50, AuditMaxPerPrincipal: 200, AuditMaxRecords: 2000,
		InitialGrants: map[string]security.Permission{"alice": security.PermRead}})
	alice := sc.as(li, "alice", "")
	waitBound(t, ctx, alice, "read")

	if _, err := alice.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "alice", Permission: "admin"}); err == nil {
		t.Fatal("alice granted herself admin")
	}
	const flood = 120
	var wg sync.WaitGroup
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = alice.AclList(ctx, &adminpb.AclListRequest{})
		}()
	}
	wg.Wait()
	// The last record: every master exports it once it is final.
	if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "omega", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range sc.nodes {
		id := n.srv.b.ID()
		path := filepath.Join(dir, id+".jsonl")
		waitExported(t, id, path, `\"omega\"`)
		grantRefused, flooded := false, 0
		for _, l := range exportedOnceEach(t, id, path) {
			if l.Principal == "client/alice" && l.Refused {
				switch l.Method {
				case "AclGrant":
					grantRefused = true
				case "AclList":
					flooded++
				}
			}
		}
		if !grantRefused {
			t.Errorf("%s: the refused AclGrant is not in the file", id)
		}
		if flooded != flood {
			t.Errorf("%s: %d refused AclList calls in the file, want %d", id, flooded, flood)
		}
	}
}

// waitExported waits until master id's audit file at path holds last,
// the last record's text as a line holds it.
func waitExported(t *testing.T, id, path, last string) {
	t.Helper()
	testwait.For(t, 20*time.Second, id+" exports the last record", func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte(last))
	})
}

// exportedOnceEach is master id's audit file at path, its lines parsed:
// each record once (a record exported PENDING has its outcome as a second
// line, which stands for it here), and of each term every record up to
// the last (a leader numbers its term's records from 1).
func exportedOnceEach(t *testing.T, id, path string) []access.ExportLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []access.ExportLine
	byTerm := map[uint64][]uint64{}
	seen := map[string]int{} // where in out
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var l access.ExportLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("%s: line %q: %v", id, line, err)
		}
		if i, ok := seen[l.ID]; ok {
			// A record written PENDING whose outcome came after it was
			// exported (the queue too full to hold it back) has the
			// outcome as a line of its own, once.
			if out[i].Code != access.AuditPending || l.Code == access.AuditPending {
				t.Fatalf("%s: record %s written twice: %s and %s", id, l.ID, out[i].Code, l.Code)
			}
			out[i] = l
			continue
		}
		seen[l.ID] = len(out)
		var term, num uint64
		if _, err := fmt.Sscanf(l.ID, "%d-%d", &term, &num); err != nil {
			t.Fatalf("%s: id %q: %v", id, l.ID, err)
		}
		byTerm[term] = append(byTerm[term], num)
		out = append(out, l)
	}
	for term, nums := range byTerm {
		slices.Sort(nums)
		if missing := int(nums[len(nums)-1]) - len(nums); missing != 0 {
			t.Errorf("%s: term %d: %d of the records up to %d missing from the file", id, term, missing, nums[len(nums)-1])
		}
	}
	return out
}

// TestAuditFileQueueOverflowRereads: an exporter whose queue fills (its
// disk behind) lets the records past it go and rereads them from the
// trail: with nothing pruned, the file still holds each record (its outcome; after a PENDING line if the full queue released it
// early).
func TestAuditFileQueueOverflowRereads(t *testing.T) {
	dir := t.TempDir()
	sc := startSecureCluster(t, 3, Access{AuditFile: &AuditExport{Path: dir},
		InitialGrants: map[string]security.Permission{"root": security.PermAdmin}})
	for _, n := range sc.nodes {
		// Two or three records: any one fits, so the rereads make
		// progress, and the grants' PENDING records, held until their
		// outcomes come, overflow it whatever the machine's pace (2,000
		// bytes held a dozen of the records format 2 writes, which a
		// loaded run did not always have in flight at once).
		n.srv.exporter.SetMaxHeld(400)
	}
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
	var wg sync.WaitGroup
	const grants = 60
	for i := range grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: fmt.Sprintf("u%d", i), Permission: "read"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, n := range sc.nodes {
		id := n.srv.b.ID()
		path := filepath.Join(dir, id+".jsonl")
		// lines: each record's lines, by id; a record written PENDING
		// (the queue full) has its outcome on a later line.
		lines := func() map[string][]string {
			b, _ := os.ReadFile(path)
			out := map[string][]string{}
			for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
				var l access.ExportLine
				if json.Unmarshal(line, &l) == nil && l.ID != "" {
					out[l.ID] = append(out[l.ID], l.Code)
				}
			}
			return out
		}
		final := func(codes []string) bool { return codes[len(codes)-1] != access.AuditPending }
		testwait.For(t, 20*time.Second, id+" exports every grant's outcome", func() bool {
			done := 0
			for _, codes := range lines() {
				if final(codes) {
					done++
				}
			}
			return done >= grants
		})
		for rid, codes := range lines() {
			if len(codes) > 2 || (len(codes) == 2 && codes[0] != access.AuditPending) || !final(codes) {
				t.Errorf("%s: record %s written as %v: want its outcome once, after at most one PENDING", id, rid, codes)
			}
		}
		if got := testutil.ToFloat64(n.srv.exporter.Overflows()); got == 0 {
			t.Errorf("%s: the queue never overflowed; the test tests nothing", id)
		}
	}
}
