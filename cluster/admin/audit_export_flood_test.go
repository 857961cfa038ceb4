package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestAuditFileKeepsWhatPruningDrops: a caller's refusal pushed out of
// the trail by its own flood of refusals at once, before any export
// could have read it, is still in every master's file, and each file
// holds every record its master committed: no id of a term is missing
// up to its last.
func TestAuditFileKeepsWhatPruningDrops(t *testing.T) {
	dir := t.TempDir()
	sc := startSecureCluster(t, 3, Access{AuditFile: &AuditExport{Path: dir},
		AuditMaxRefusedPerCaller: 50, AuditMaxPerPrincipal: 200, AuditMaxRecords: 2000,
		InitialGrants: map[string]security.Permission{"root": security.PermAdmin, "alice": security.PermRead}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
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
		testwait.For(t, 20*time.Second, id+" exports the last grant", func() bool {
			b, _ := os.ReadFile(path)
			return bytes.Contains(b, []byte(`\"omega\"`))
		})
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		grantRefused, flooded := false, 0
		byTerm := map[uint64][]uint64{}
		seen := map[string]bool{}
		for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			var l access.ExportLine
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatalf("%s: line %q: %v", id, line, err)
			}
			if seen[l.ID] {
				t.Fatalf("%s: record %s written twice", id, l.ID)
			}
			seen[l.ID] = true
			var term, num uint64
			if _, err := fmt.Sscanf(l.ID, "%d-%d", &term, &num); err != nil {
				t.Fatalf("%s: id %q: %v", id, l.ID, err)
			}
			byTerm[term] = append(byTerm[term], num)
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
		for term, nums := range byTerm {
			sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
			// A leader numbers its term's records from 1.
			if missing := int(nums[len(nums)-1]) - len(nums); missing != 0 {
				t.Errorf("%s: term %d: %d of the records up to %d missing from the file", id, term, missing, nums[len(nums)-1])
			}
		}
	}
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
		n.srv.exporter.SetMaxHeld(2000) // a few records
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
