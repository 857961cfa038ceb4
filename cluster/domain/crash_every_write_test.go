package domain_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// The domain's procedures through a leader lost at each of their writes:
// proceduretest's RecoveryAndDoubleExecution, at the cluster's scale. The
// leader's executor store fails the chosen write as a leader cut off at
// that moment would, the leader is cut off, another takes over from the
// replicated log and finishes the procedure, and the outcome must be the
// one a run without the fault has: the table's regions each open on one
// server, or closed, or gone.

// maxCrashPoints bounds the runs of one procedure: its writes in a clean
// run, unless background work inflated them.
const maxCrashPoints = 30

// errLeaderCut is the write a leader cut off never made.
var errLeaderCut = errors.New("injected: the leader is cut off at this write")

// writeFault counts the executors' store writes across the cluster and
// fails the one it is armed for, telling which master made it.
type writeFault struct {
	mu      sync.Mutex
	writes  int
	armAt   int // the write that fails, counted from 1; 0: none
	abortAt int // the write after which the procedure is aborted; 0: none
	cut     chan string
	abort   chan struct{}
}

// abortAfter asks for an abort once after more writes are made.
func (f *writeFault) abortAfter(more int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abortAt = f.writes + more
}

func (f *writeFault) take(node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.abortAt != 0 && f.writes >= f.abortAt {
		f.abortAt = 0
		f.abort <- struct{}{}
	}
	if f.armAt != 0 && f.writes == f.armAt {
		f.armAt = 0
		f.cut <- node
		return errLeaderCut
	}
	return nil
}

func (f *writeFault) arm(after int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt = f.writes + after + 1
	return f.writes
}

func (f *writeFault) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt, f.abortAt = 0, 0
}

func (f *writeFault) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// faultStore is a leader executor's store with writeFault in front of its
// writes; reads pass through.
type faultStore struct {
	inner interface {
		store.DeleteMutator
		store.Reader
	}
	f    *writeFault
	node string
}

func (s *faultStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) { return s.inner.Load(fn) }
func (s *faultStore) Close() error                                           { return s.inner.Close() }
func (s *faultStore) Proc(id uint64) ([]byte, bool)                          { return s.inner.Proc(id) }
func (s *faultStore) Value(key string) ([]byte, bool)                        { return s.inner.Value(key) }
func (s *faultStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	s.inner.ScanValues(prefix, fn)
}

func (s *faultStore) Insert(p store.Proc, children []store.Proc) error {
	return s.InsertAndMutate(p, children, nil)
}

func (s *faultStore) Update(p store.Proc) error { return s.UpdateAndMutate(p, nil) }

func (s *faultStore) Delete(ids []uint64) error { return s.DeleteAndMutate(ids, nil) }

func (s *faultStore) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.InsertAndMutate(p, children, muts)
}

func (s *faultStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.UpdateAndMutate(p, muts)
}

func (s *faultStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.DeleteAndMutate(ids, muts)
}

// TestDomainProceduresSurviveALeaderLostAtEveryWrite runs create, disable,
// enable, move and delete of a table once without a fault, then once per
// write the clean run made (every other one in -short), with the leader
// lost at that write.
func TestDomainProceduresSurviveALeaderLostAtEveryWrite(t *testing.T) {
	fault := &writeFault{cut: make(chan string, 1), abort: make(chan struct{}, 1)}
	ids := map[string]int{}
	h := newHarness(t, harnessOpts{servers: 3, node: func(nc *cluster.Config) {
		node := nc.ID
		nc.Executor = func(pc *procedure.Config) {
			inner, ok := pc.Store.(interface {
				store.DeleteMutator
				store.Reader
			})
			if !ok {
				panic(fmt.Sprintf("the executor's store %T keeps no domain state", pc.Store))
			}
			pc.Store = &faultStore{inner: inner, f: fault, node: node}
		}
	}})
	for i, m := range h.masters {
		ids[m.node.ID()] = i
	}
	const regions = 3
	table := 0
	type op struct {
		name string
		// prepare brings a fresh table to where the procedure starts, and
		// returns the procedure; check asserts the outcome; undone, if
		// set, what a rollback leaves (the procedure can be aborted).
		prepare func(name string) procedure.Procedure
		check   func(name string)
		undone  func(name string)
	}
	must := func(p procedure.Procedure, err error) procedure.Procedure {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	created := func(name string) {
		h.mustSucceed(h.createTable("", name, regions), 30*time.Second)
	}
	disabled := func(name string) {
		created(name)
		h.mustSucceed(h.submit(mustDisable(t, "", name), ""), 30*time.Second)
	}
	closed := func(name string) {
		r := h.reader()
		domain.ScanRegions(r, func(region string, rg domain.Region) bool {
			if rg.Table == "default:"+name && rg.State != domain.RegionClosed && rg.State != domain.RegionOffline {
				t.Errorf("%s: region %s %s after the disable", name, region, rg.State)
			}
			return true
		})
	}
	isOpen := func(name string) { h.checkTableOpen("default:"+name, regions) }
	gone := func(name string) { h.checkTableGone("default:" + name) }
	ops := []op{
		{"create", func(name string) procedure.Procedure { return must(domain.NewCreateTable("", name, regions)) }, isOpen, gone},
		{"disable", func(name string) procedure.Procedure { created(name); return mustDisable(t, "", name) }, closed, isOpen},
		{"enable", func(name string) procedure.Procedure { disabled(name); return must(domain.NewEnableTable("", name)) }, isOpen, closed},
		{"move", func(name string) procedure.Procedure {
			created(name)
			var region string
			domain.ScanRegions(h.reader(), func(r string, rg domain.Region) bool {
				if rg.Table == "default:"+name {
					region = r
					return false
				}
				return true
			})
			lm, _ := h.leader()
			return must(lm.dom.MoveRegionProcedure(region, ""))
		}, isOpen, nil},
		{"delete", func(name string) procedure.Procedure { disabled(name); return must(domain.NewDeleteTable("", name)) }, gone, nil},
		{"balance", func(name string) procedure.Procedure {
			created(name)
			lm, _ := h.leader()
			return must(lm.dom.BalanceProcedure())
		}, isOpen, nil},
	}
	cuts, rolledBack := 0, 0
	step := 1
	if testing.Short() {
		step = 2
	}
	// cutOff cuts off the leader whose write failed, if one did, until
	// another leads.
	cutOff := func() {
		select {
		case node := <-fault.cut:
			i := ids[node]
			cuts++
			h.isolateRaft(i)
			testwait.For(t, time.Minute, "another leader", func() bool {
				li, _ := h.c.WaitLeader()
				return li != i
			})
			h.healRaft(i)
		default:
		}
	}
	// run runs o on a fresh table with the leader lost at write `at` of the
	// procedure (0: none), and returns the writes it made. With abortAt,
	// the procedure is aborted after that write instead, and the leader is
	// lost two writes later, in its rollback.
	run := func(o op, at int, abortAt ...int) int {
		table++
		name := fmt.Sprintf("%s%d", o.name, table)
		p := o.prepare(name)
		before := fault.count()
		aborting := len(abortAt) > 0
		if aborting {
			fault.abortAfter(abortAt[0])
			fault.arm(abortAt[0] + 1)
		} else if at > 0 {
			fault.arm(at - 1)
		}
		id := h.submit(p, name)
		var info procedure.Info
		testwait.For(t, 2*time.Minute, fmt.Sprintf("%s with the leader lost at write %d (aborted: %v)", name, at, abortAt), func() bool {
			cutOff()
			_, x := h.c.LeaderNow()
			if x == nil {
				return false
			}
			select {
			case <-fault.abort:
				if err := x.Abort(id); err != nil && !errors.Is(err, procedure.ErrNotAllowed) {
					fault.abortAfter(0) // a leader changing: asked again at the next write
				}
			default:
			}
			var err error
			info, err = x.Get(id)
			return err == nil && info.State.Terminal()
		})
		fault.disarm() // if the procedure ended before that write
		switch {
		case info.State == procedure.Success:
			o.check(name)
		case aborting && info.State == procedure.RolledBack:
			rolledBack++
			o.undone(name)
		default:
			t.Fatalf("%s with the leader lost at write %d (aborted: %v): %s (%s)", name, at, abortAt, info.State, info.Error)
		}
		h.checkNoDoubles()
		return fault.count() - before
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			// Writes are counted across the cluster: a background
			// procedure (a crash recovery after a lease lost on a loaded
			// machine) adds to them, and a later run may end before the
			// write it is armed for. Every run's outcome is checked; the
			// log says how many of the faults took effect.
			writes := run(o, 0)
			before, runs := cuts, 0
			for at := 1; at <= min(writes, maxCrashPoints); at += step {
				run(o, at)
				runs++
			}
			t.Logf("%s: %d writes in a clean run; the leader lost at %d of %d runs", o.name, writes, cuts-before, runs)
			if writes < 2 || cuts == before {
				t.Fatalf("%s: %d writes, %d leaders lost: the faults did not take effect", o.name, writes, cuts-before)
			}
			if o.undone == nil {
				return
			}
			// Aborted after each write, the leader lost in the rollback.
			rb := rolledBack
			for k := 1; k < min(writes, maxCrashPoints); k += step {
				run(o, 0, k)
			}
			t.Logf("%s: aborted after each of its writes: %d rolled back, the rest too late to", o.name, rolledBack-rb)
		})
	}

	// An abort lands after the write it follows, as soon as the test sees
	// it: on a loaded machine later than asked, which may be past the
	// states that can roll back. Some must have.
	if rolledBack == 0 {
		t.Fatal("no abort rolled a procedure back")
	}

	// A region server's crash: its ServerCrash procedure (and the region
	// moves it spawns) with the leader lost at each of their writes.
	t.Run("server crash", func(t *testing.T) {
		crash := func(at int) int {
			table++
			name := fmt.Sprintf("crash%d", table)
			created(name)
			per := h.checkTableOpen("default:"+name, regions)
			victim := busiestServer(per)
			before := fault.count()
			if at > 0 {
				fault.arm(at - 1)
			}
			h.stopRS(victim)
			testwait.For(t, 2*time.Minute, fmt.Sprintf("%s's regions reopened with the leader lost at write %d", victim, at), func() bool {
				cutOff()
				problems, _ := h.tableOpenProblems("default:"+name, regions)
				return len(problems) == 0 && h.crashesDone()
			})
			fault.disarm()
			h.checkNoDoubles()
			writes := fault.count() - before
			h.startRS(victim, 0, 0)
			testwait.For(t, time.Minute, victim+" back", func() bool { _, ok := h.liveRS()[victim]; return ok })
			return writes
		}
		writes := crash(0)
		before := cuts
		for at := 1; at <= min(writes, maxCrashPoints); at += max(step, writes/12) {
			crash(at)
		}
		t.Logf("server crash: %d writes in a clean run; the leader lost at %d of them", writes, cuts-before)
		if writes < 2 || cuts == before {
			t.Fatalf("server crash: %d writes, %d leaders lost", writes, cuts-before)
		}
	})
}

// crashesDone says no ServerCrash procedure is unfinished on the leader.
func (h *harness) crashesDone() bool {
	_, x := h.c.LeaderNow()
	if x == nil {
		return false
	}
	for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		if !c.State.Terminal() {
			return false
		}
	}
	return true
}
