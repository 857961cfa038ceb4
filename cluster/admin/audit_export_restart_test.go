package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

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
	sc := startSecureCluster(t, 3, Access{AuditFile: &AuditExport{Path: dir},
		InitialGrants: map[string]security.Permission{"root": security.PermAdmin}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
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
