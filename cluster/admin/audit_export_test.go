package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	sc := startSecureCluster(t, 3, Access{AuditFile: &AuditExport{Path: dir, MaxBytes: 1500, Keep: 2},
		InitialGrants: map[string]security.Permission{"root": security.PermAdmin}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
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
		testwait.For(t, 20*time.Second, id+" exports the last grant", func() bool {
			b, _ := os.ReadFile(path)
			return bytes.Contains(b, []byte(last))
		})
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
