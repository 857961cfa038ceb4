package cluster

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// failingLogStore is an in-memory raft log whose writes fail with EIO
// while fail is set: a disk whose fsync (or write) fails under bolt.
type failingLogStore struct {
	*raft.InmemStore
	fail atomic.Bool
}

func (s *failingLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *failingLogStore) StoreLogs(ls []*raft.Log) error {
	if s.fail.Load() {
		return syscall.EIO
	}
	return s.InmemStore.StoreLogs(ls)
}

// A leader whose local WAL's fdatasync fails stops its executor, hands
// leadership over and reports the failure (Executor answers a
// *StorageError, so the admin layer reports not ready); the cluster goes on
// and every procedure finishes. The failure is sticky: the node stays out
// of leadership until restarted.
func TestWALFsyncFailureStopsLeading(t *testing.T) {
	fail := make([]atomic.Bool, 3)
	c := newTestCluster(t, clusterOpts{tweak: func(i int, cfg *Config) {
		cfg.WAL = store.WALConfig{
			SyncInterval: 10 * time.Millisecond,
			SyncData: func(*os.File) error {
				if fail[i].Load() {
					return syscall.EIO
				}
				return nil
			},
		}
	}})
	li, x := c.leader()
	ids := submit(t, x, 5, 3, 5*time.Millisecond)
	c.waitAllSuccess(ids, 3)

	fail[li].Store(true)
	// Work keeps the WAL dirty, so its next background sync fails. That
	// sync may fail (and stop the executor) before the last of these is
	// submitted: the ones acknowledged must finish all the same.
	var more []uint64
	for range 5 {
		id, err := x.Submit(&stepProc{Steps: 3, Pause: 5 * time.Millisecond}, procedure.SubmitOptions{})
		if errors.Is(err, procedure.ErrStopped) {
			break
		}
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		more = append(more, id)
	}
	var serr error
	testwait.For(t, 10*time.Second, "the leader to notice its WAL's fsync failure", func() bool {
		serr = c.nodes[li].StorageErr()
		return serr != nil
	})
	if !errors.Is(serr, ErrStorageFailed) || !errors.Is(serr, syscall.EIO) || !strings.Contains(serr.Error(), "fdatasync") {
		t.Fatalf("StorageErr = %v; want ErrStorageFailed wrapping the fdatasync's EIO", serr)
	}
	nl, _ := c.leader(li)
	testwait.For(t, 10*time.Second, "the failed node to stop leading", func() bool {
		return c.nodes[li].Raft().State() != raft.Leader
	})
	if _, err := c.nodes[li].Executor(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("failed node's Executor() = %v, want ErrStorageFailed", err)
	}
	if st := c.nodes[li].Status(); st.StorageErr == "" || st.Executor {
		t.Fatalf("failed node's status: storage_err %q, executor %v", st.StorageErr, st.Executor)
	}
	t.Logf("m%d's WAL fsync failed; m%d leads; m%d says: %v", li, nl, li, serr)
	c.waitAllSuccess(append(ids, more...), 3)
	// Leadership does not come back to it while the failure lasts: not
	// once while the others run more work to the end.
	_, nx := c.leader(li)
	later := submit(t, nx, 5, 3, 5*time.Millisecond)
	testwait.For(t, 30*time.Second, "the others to finish more work", func() bool {
		if _, err := c.nodes[li].Executor(); err == nil {
			t.Fatal("the node with a failed WAL runs an executor again")
		}
		for _, id := range later {
			if info, err := nx.Get(id); err != nil || info.State != procedure.Success {
				return false
			}
		}
		return true
	})
	c.waitAllSuccess(later, 3)
}

// A leader whose raft log write fails (bolt's fsync returning EIO) never
// acknowledges the write: raft answers it with the error and steps down.
// The node reports the failure while it lasts and, the raft log being
// writable again, follows and catches up in place, without a restart.
func TestRaftLogWriteFailureIsNotAcknowledged(t *testing.T) {
	logs := make([]*failingLogStore, 3)
	c := newTestCluster(t, clusterOpts{tweak: func(i int, cfg *Config) {
		logs[i] = &failingLogStore{InmemStore: raft.NewInmemStore()}
		cfg.LogStore = logs[i]
		cfg.StableStore = logs[i].InmemStore
	}})
	li, x := c.leader()
	ids := submit(t, x, 3, 2, 0)
	c.waitAllSuccess(ids, 2)

	logs[li].fail.Store(true)
	id, err := x.Submit(&stepProc{Steps: 2}, procedure.SubmitOptions{Nonce: "during-failure"})
	if err == nil {
		t.Fatalf("submit on a leader whose raft log fails was acknowledged (id %d)", id)
	}
	t.Logf("submit on the failing leader: %v", err)
	nl, nx := c.leader(li)
	if st := c.nodes[li].Status(); st.StorageErr == "" || !strings.Contains(st.StorageErr, "raft log") {
		t.Fatalf("failing node's storage_err %q, want the raft log's failure", st.StorageErr)
	}
	// The nonce was not committed anywhere: the new leader starts it anew.
	id2, err := nx.Submit(&stepProc{Steps: 2}, procedure.SubmitOptions{Nonce: "during-failure"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitAllSuccess([]uint64{id2}, 2)

	logs[li].fail.Store(false)
	testwait.For(t, 10*time.Second, "the node to recover in place and catch up", func() bool {
		return c.nodes[li].StorageErr() == nil && c.nodes[li].FSM().AppliedIndex() >= c.nodes[nl].FSM().AppliedIndex()
	})
	if a, b := c.nodes[li].FSM().MaxProcID(), c.nodes[nl].FSM().MaxProcID(); a != b {
		t.Fatalf("recovered node's max proc id %d, leader's %d", a, b)
	}
}

// failingStable is an in-memory stable store whose writes fail with ENOSPC
// while fail is set.
type failingStable struct {
	*raft.InmemStore
	fail  atomic.Bool
	tried atomic.Int64 // failed writes
}

func (s *failingStable) Set(k, v []byte) error {
	if s.fail.Load() {
		s.tried.Add(1)
		return syscall.ENOSPC
	}
	return s.InmemStore.Set(k, v)
}

func (s *failingStable) SetUint64(k []byte, v uint64) error {
	if s.fail.Load() {
		s.tried.Add(1)
		return syscall.ENOSPC
	}
	return s.InmemStore.SetUint64(k, v)
}

// A follower that cannot persist a new term (raft would panic: "failed to
// save current term") waits for the disk instead: it reports the failure,
// never claims the new term was saved, and once writes succeed again it
// carries on in place and catches up. A node stuck that way still shuts
// down.
func TestStableStoreFailureWaitsForDisk(t *testing.T) {
	stables := make([]*failingStable, 3)
	c := newTestCluster(t, clusterOpts{tweak: func(i int, cfg *Config) {
		stables[i] = &failingStable{InmemStore: raft.NewInmemStore()}
		cfg.LogStore = stables[i].InmemStore
		cfg.StableStore = stables[i]
	}})
	li, x := c.leader()
	c.waitAllSuccess(submit(t, x, 3, 2, 0), 2)
	f, other := (li+1)%3, (li+2)%3
	stables[f].fail.Store(true)
	// A new leader means a new term, which f must persist.
	tr := c.nodes[li].Raft().LeadershipTransferToServer(raft.ServerID(c.cfgs[other].ID), raft.ServerAddress(c.nodes[other].Addr()))
	if err := tr.Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	testwait.For(t, 10*time.Second, "the follower to report its stable store failure", func() bool {
		err := c.nodes[f].StorageErr()
		return err != nil && strings.Contains(err.Error(), "raft stable store") && errors.Is(err, syscall.ENOSPC)
	})
	if _, err := c.nodes[f].Executor(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("Executor() on the failing node = %v, want ErrStorageFailed", err)
	}
	nl, nx := c.leader(f)
	ids := submit(t, nx, 3, 2, 0)
	c.waitAllSuccess(ids, 2)
	if got := stables[f].tried.Load(); got < 1 {
		t.Fatalf("no failed stable-store write was made")
	}

	stables[f].fail.Store(false)
	testwait.For(t, 10*time.Second, "the node to recover in place and catch up", func() bool {
		return c.nodes[f].StorageErr() == nil && c.nodes[f].FSM().AppliedIndex() >= c.nodes[nl].FSM().AppliedIndex()
	})
	term, err := stables[f].InmemStore.GetUint64([]byte("CurrentTerm"))
	if err != nil || term != c.nodes[nl].Raft().CurrentTerm() {
		t.Fatalf("persisted term %d (%v), leader's term %d", term, err, c.nodes[nl].Raft().CurrentTerm())
	}

	// Stuck again, then killed: the shutdown still finishes.
	stables[f].fail.Store(true)
	tr = c.nodes[nl].Raft().LeadershipTransferToServer(raft.ServerID(c.cfgs[li].ID), raft.ServerAddress(c.nodes[li].Addr()))
	if err := tr.Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	testwait.For(t, 10*time.Second, "the follower to fail again", func() bool { return c.nodes[f].StorageErr() != nil })
	done := make(chan error, 1)
	go func() { done <- c.nodes[f].Kill() }()
	select {
	case err := <-done:
		t.Logf("kill of the stuck node: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Kill of a node whose term write waits for the disk did not return")
	}
	c.nodes[f] = nil
}
