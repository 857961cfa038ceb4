package cluster

import (
	"testing"

	"github.com/baton-dev/baton/store"
)

// The FSM's WAL only accelerates restarts, so by default it does not fsync
// every apply (the raft log does).
func TestDefaultConfigWALSyncOnRoll(t *testing.T) {
	if got := DefaultConfig().WAL.Sync; got != store.SyncOnRoll {
		t.Fatalf("DefaultConfig().WAL.Sync = %v, want %v", got, store.SyncOnRoll)
	}
}
