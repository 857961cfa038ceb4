package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

func TestClusterConverges(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	l := c.leader()
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
	defer s.Close()
	if _, err := s.Load(func(store.Proc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				id := uint64(g*1000 + i + 1)
				key := fmt.Sprintf("region/%d", id)
				if err := s.Insert(store.Proc{ID: id, Data: []byte("new")}, nil); err != nil {
					t.Error(err)
					return
				}
				if err := s.UpdateWith(store.Proc{ID: id, Data: []byte("opened")}, []Mutation{Put(key, []byte("open"))}); err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					if err := s.Delete([]uint64{id}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	d := c.converge(l)
	if len(d.procs) != 8*20 || len(d.kv) != 8*25 || d.maxID != 7025 {
		t.Fatalf("converged state %v", d)
	}
	// Load on the leader serves the same state.
	var n int
	info, err := s.Load(func(p store.Proc) error {
		if d.procs[p.ID] != string(p.Data) {
			t.Errorf("Load: proc %d = %q", p.ID, p.Data)
		}
		n++
		return nil
	})
	if err != nil || n != len(d.procs) || info.MaxID != 7025 || info.Live != n {
		t.Fatalf("Load: %+v, %v, %d procs", info, err, n)
	}
}

func TestClusterUnknownAndGarbageEntries(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	l := c.leader()
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
	defer s.Close()
	if err := s.Insert(store.Proc{ID: 1, Data: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	before := c.converge(l)

	apply := func(data []byte) any {
		f := l.r.Apply(data, time.Second)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return f.Response()
	}
	optional, _ := EncodeCommand(raftpb.CommandType(42), true, []byte("later"))
	mandatory, _ := EncodeCommand(raftpb.CommandType(43), false, []byte("later"))
	if r := apply(optional); r != nil {
		t.Fatalf("unknown optional command: %v", r)
	}
	if err, _ := apply(mandatory).(error); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("unknown mandatory command: %v", err)
	}
	if err, _ := apply([]byte("not a baton entry")).(error); !errors.Is(err, ErrNotCommand) {
		t.Fatalf("garbage entry: %v", err)
	}
	after := c.converge(l)
	after.index = before.index
	if !after.equal(before) {
		t.Fatalf("state changed: %v -> %v", before, after)
	}
	// The cluster keeps working.
	if err := s.Update(store.Proc{ID: 1, Data: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	c.converge(l)
}

func TestRaftStoreGroupCommit(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	l := c.leader()
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{MaxInFlight: 1})
	defer s.Close()
	const writers, each = 50, 10
	for i := range writers {
		if err := s.Insert(store.Proc{ID: uint64(i + 1), Data: []byte("0")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats()
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range each {
				if err := s.Update(store.Proc{ID: uint64(i + 1), Data: fmt.Appendf(nil, "%d", j+1)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	calls, entries := st.Writes-before.Writes, st.Entries-before.Entries
	t.Logf("%d concurrent updates in %d raft entries", calls, entries)
	if calls != writers*each || entries >= calls {
		t.Fatalf("%d calls in %d entries: no coalescing", calls, entries)
	}
	d := c.converge(l)
	for i := range writers {
		if d.procs[uint64(i+1)] != fmt.Sprint(each) {
			t.Fatalf("proc %d = %q", i+1, d.procs[uint64(i+1)])
		}
	}
}

// lingerStore is a RaftStore with only what linger uses: the last entry
// answered `answered` writes with `queued` queued behind it, and its commit
// took long enough that the linger's bound is MaxLinger, a minute, which no
// test here reaches.
func lingerStore(answered, queued int) *RaftStore {
	s := &RaftStore{
		cfg:    RaftStoreConfig{MaxLinger: time.Minute}.withDefaults(),
		reqCh:  make(chan *request, 16),
		stopCh: make(chan struct{}),
	}
	s.lastAnswered.Store(int64(answered))
	s.lastQueued.Store(int64(queued))
	s.lastCommitNs.Store(int64(time.Hour))
	return s
}

func lingerRequests(n int) []*request {
	rs := make([]*request, n)
	for i := range rs {
		rs[i] = &request{size: 64, done: make(chan error, 1)}
	}
	return rs
}

// The writes queued behind the last entry are the writers it missed: the
// batch, which took them at once, waits on for as many more as that entry
// answered (its writers coming back), and no more. Counting only the
// entry's own writes, the batch would already be complete with the queued
// ones, and a split of the writers would never close.
func TestRaftStoreLingerWaitsForQueuedAndAnswered(t *testing.T) {
	s := lingerStore(2, 3)
	batch := lingerRequests(3)
	back := lingerRequests(3)
	for _, r := range back {
		s.reqCh <- r
	}
	got, bytes, carry := s.linger(batch, 3*64, nil)
	if len(got) != 5 || bytes != 5*64 || carry != nil {
		t.Fatalf("linger: %d writes, %d bytes, carry %v; want the 3 queued and 2 answered", len(got), bytes, carry)
	}
	if got[3] != back[0] || got[4] != back[1] {
		t.Fatal("linger took the returning writes out of order")
	}
	if len(s.reqCh) != 1 {
		t.Fatalf("%d writes left queued, want 1: the linger took more than it waits for", len(s.reqCh))
	}
}

// A lone writer, answered alone with nothing queued, is proposed at once.
func TestRaftStoreLingerLoneWriterNeverWaits(t *testing.T) {
	s := lingerStore(1, 0)
	done := make(chan int, 1)
	go func() {
		got, _, _ := s.linger(lingerRequests(1), 64, nil)
		done <- len(got)
	}()
	var n int
	testwait.For(t, 10*time.Second, "linger to return the lone write", func() bool {
		select {
		case n = <-done:
			return true
		default:
			return false
		}
	})
	if n != 1 {
		t.Fatalf("linger returned %d writes, want 1", n)
	}
}

func TestRaftStoreFollowerWrites(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	l := c.leader()
	f := c.followers(l)[0]
	s := NewRaftStore(f.r, f.fsm, RaftStoreConfig{ApplyTimeout: time.Second})
	defer s.Close()
	for name, fn := range map[string]func() error{
		"insert":     func() error { return s.Insert(store.Proc{ID: 1, Data: []byte("x")}, nil) },
		"update":     func() error { return s.Update(store.Proc{ID: 1, Data: []byte("x")}) },
		"updateWith": func() error { return s.UpdateWith(store.Proc{ID: 1}, []Mutation{Put("k", nil)}) },
		"delete":     func() error { return s.Delete([]uint64{1}) },
		"load": func() error {
			_, err := s.Load(func(store.Proc) error { return nil })
			return err
		},
	} {
		if err := fn(); !errors.Is(err, raft.ErrNotLeader) {
			t.Errorf("%s on a follower: %v, want raft.ErrNotLeader", name, err)
		}
	}
}

func TestRaftStoreInvalidAndClosed(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	l := c.leader()
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
	for _, w := range []Write{
		{Inserts: []store.Proc{{ID: 0}}},
		{Updates: []store.Proc{{ID: MaxProcID + 1}}},
		{Deletes: []uint64{0}},
		{Mutations: []Mutation{{Op: OpPut}}},
		{Mutations: []Mutation{{Op: 9, Key: "k"}}},
	} {
		if err := s.Commit(context.Background(), w); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Commit(%+v) = %v, want store.ErrInvalid", w, err)
		}
	}
	s.Close()
	if err := s.Update(store.Proc{ID: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// A follower cut off while the leader compacts its log catches up through
// InstallSnapshot, i.e. FSM.Restore, and converges.
func TestFollowerRestoredFromSnapshot(t *testing.T) {
	c := newCluster(t, clusterOpts{trailingLogs: 5, snapThresh: 20})
	l := c.leader()
	lag := c.followers(l)[0]
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
	defer s.Close()
	if err := s.UpdateWith(store.Proc{ID: 1, Data: []byte("before")}, []Mutation{Put("a", []byte("1"))}); err != nil {
		t.Fatal(err)
	}
	c.converge(l)
	c.isolate(lag)
	for i := range 100 {
		id := uint64(i + 2)
		if err := s.UpdateWith(store.Proc{ID: id, Data: []byte("while away")}, []Mutation{Put(fmt.Sprintf("k/%03d", i), []byte("v")), Del("a")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete([]uint64{2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	first, _ := l.logs.FirstIndex()
	if first <= lag.fsm.AppliedIndex()+1 {
		t.Fatalf("log not compacted past the lagging follower: first %d, follower at %d", first, lag.fsm.AppliedIndex())
	}
	restoresBefore := lag.fsm.walGenSafe()
	c.reconnect(lag)
	d := c.converge(l)
	if len(d.procs) != 99 || len(d.kv) != 100 {
		t.Fatalf("converged state %v", d)
	}
	if lag.fsm.walGenSafe() == restoresBefore {
		t.Fatal("follower caught up without a snapshot restore")
	}
	// The restore went into the follower's WAL (tagged with the snapshot's
	// index), and the entries after it were appended there too.
	if wi := lag.fsm.WALIndex(); wi < first {
		t.Fatalf("restored follower's WAL index %d below the snapshot's log start %d", wi, first)
	}
}

func (f *FSM) walGenSafe() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.walGen
}

// The restart path end to end on one node: the FSM reloads its WAL, raft
// restarts with NoSnapshotRestoreOnStart (NeedsSnapshotRestore says it may)
// and replays its log; the FSM skips everything it already had and writes
// nothing to its WAL.
func TestNodeRestartFromWAL(t *testing.T) {
	dir := t.TempDir()
	fsmCfg := Config{Dir: dir, WAL: store.WALConfig{NoSync: true}}
	f, err := NewFSM(fsmCfg)
	if err != nil {
		t.Fatal(err)
	}
	logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	conf := fastConfig("solo", clusterOpts{})
	if err := raft.BootstrapCluster(conf, logs, logs, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "solo", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, f, logs, logs, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader := func(r *raft.Raft) {
		testwait.For(t, 5*time.Second, "a leader", func() bool { return r.State() == raft.Leader })
	}
	waitLeader(r)
	s := NewRaftStore(r, f, RaftStoreConfig{})
	for i := range 30 {
		if err := s.UpdateWith(store.Proc{ID: uint64(i + 1), Data: []byte("v")}, []Mutation{Put(fmt.Sprint("k", i), []byte("x"))}); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := dumpOf(t, f)
	s.Close()
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	g, err := NewFSM(fsmCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	need, err := NeedsSnapshotRestore(snaps, g.LoadedIndex())
	if err != nil || need {
		t.Fatalf("NeedsSnapshotRestore(W=%d) = %v, %v", g.LoadedIndex(), need, err)
	}
	conf.NoSnapshotRestoreOnStart = true
	_, trans2 := raft.NewInmemTransport(addr)
	r2, err := raft.NewRaft(conf, g, logs, logs, snaps, trans2)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Shutdown()
	waitLeader(r2)
	if err := r2.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	got := dumpOf(t, g)
	got.index = want.index // raft's own entries after the restart may advance it
	if !got.equal(want) {
		t.Fatalf("after restart %v, want %v", got, want)
	}
	if n := g.Stats(); n.Applied != 0 || n.WALAppends != 0 {
		t.Fatalf("replay re-applied %d commands, wrote %d WAL records", n.Applied, n.WALAppends)
	}
}
