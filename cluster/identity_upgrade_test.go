package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// A data directory from before node-id files existed has raft state but no
// record of its node: its raft configuration decides.
func TestNodeIDOfAnOlderDirectoryComesFromItsRaftConfiguration(t *testing.T) {
	stores := func(t *testing.T) (*raft.InmemStore, raft.SnapshotStore) {
		ls := raft.NewInmemStore()
		conf := raft.Configuration{Servers: []raft.Server{
			{ID: "n1", Address: "127.0.0.1:8101", Suffrage: raft.Voter},
			{ID: "n2", Address: "127.0.0.1:8201", Suffrage: raft.Voter},
		}}
		if err := ls.StoreLogs([]*raft.Log{
			{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)},
			{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("x")},
		}); err != nil {
			t.Fatal(err)
		}
		if err := ls.SetUint64([]byte("CurrentTerm"), 1); err != nil {
			t.Fatal(err)
		}
		return ls, raft.NewInmemSnapshotStore()
	}
	for _, tc := range []struct {
		name, id, addr, refusal string
	}{
		{name: "its own member", id: "n2", addr: "127.0.0.1:8201"},
		{name: "not a member", id: "n9", addr: "127.0.0.1:8901", refusal: "members are n1, n2"},
		{name: "another member's address", id: "n9", addr: "127.0.0.1:8101", refusal: `node "n1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ls, snaps := stores(t)
			err := checkNodeID(dir, tc.id, tc.addr, ls, ls, snaps)
			recorded, rerr := os.ReadFile(filepath.Join(dir, nodeIDFile))
			if tc.refusal == "" {
				if err != nil || rerr != nil || strings.TrimSpace(string(recorded)) != tc.id {
					t.Fatalf("checkNodeID = %v; recorded %q (%v); want %s accepted and recorded", err, recorded, rerr, tc.id)
				}
				return
			}
			if !errors.Is(err, ErrWrongNode) || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("checkNodeID = %v; want ErrWrongNode naming %s", err, tc.refusal)
			}
			if rerr == nil {
				t.Fatalf("a refused id was recorded: %q", recorded)
			}
		})
	}
	// A fresh directory (no raft state) takes any id.
	dir := t.TempDir()
	ls := raft.NewInmemStore()
	if err := checkNodeID(dir, "n7", "", ls, ls, raft.NewInmemSnapshotStore()); err != nil {
		t.Fatalf("fresh directory: %v", err)
	}
}
