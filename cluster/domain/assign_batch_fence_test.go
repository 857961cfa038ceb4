package domain_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
)

// A batch's target is fenced (its lease expired at the master) while its
// process still runs and answers: the heartbeats it sends are lost, so it
// cannot learn of the expiry and serves until its own self-fence
// deadline. Whatever it answers then, a batch must neither record a region
// OPEN on it nor send it an open: its regions are reopened elsewhere once
// it has certainly stopped serving, by the assignment each is handed to.

// fenceWatch follows the leader's FSM writes, in the order it applies
// them: when incarnation ref stops being live (its expiry, or a new
// incarnation's registration, commits), and every region recorded OPEN on
// ref after that, which no procedure may write.
type fenceWatch struct {
	ref     domain.ServerRef
	expired chan struct{}

	mu   sync.Mutex
	late []string // what was seen wrong
}

func watchFence(t *testing.T, f *raftfsm.FSM, ref domain.ServerRef) *fenceWatch {
	t.Helper()
	w := &fenceWatch{ref: ref, expired: make(chan struct{})}
	stop := f.Observe(&raftfsm.PutObserver{
		Prefixes: []string{domain.ServerKey(ref.ID), domain.RegionKey("")},
		Put: func(key string, v []byte) {
			switch {
			case key == domain.ServerKey(ref.ID):
				var srv domain.Server
				if err := json.Unmarshal(v, &srv); err != nil {
					w.mu.Lock()
					w.late = append(w.late, fmt.Sprintf("server %s's record unreadable: %v", ref.ID, err))
					w.mu.Unlock()
					return
				}
				// Expired, or replaced by a new incarnation (the process
				// fenced itself and registered again first).
				if srv.StartCode != ref.StartCode || srv.State != domain.ServerLive {
					select {
					case <-w.expired:
					default:
						close(w.expired)
					}
				}
			case strings.HasPrefix(key, domain.RegionKey("")):
				select {
				case <-w.expired:
				default:
					return
				}
				name := strings.TrimPrefix(key, domain.RegionKey(""))
				rg, err := domain.DecodeRegion(name, v)
				w.mu.Lock()
				switch {
				case err != nil:
					w.late = append(w.late, fmt.Sprintf("region %s's record unreadable: %v", name, err))
				case rg.State == domain.RegionOpen && rg.OnServer(ref):
					w.late = append(w.late, fmt.Sprintf("region %s recorded OPEN on %s after it stopped being live", name, ref))
				}
				w.mu.Unlock()
			}
		},
	})
	t.Cleanup(stop)
	return w
}

// check fails t for each region recorded OPEN on the fenced incarnation.
func (w *fenceWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, problem := range w.late {
		t.Error(problem)
	}
}

// loseHeartbeats loses every heartbeat of incarnation ref, and every
// registration under its id, from the moment start is closed (at once if
// start is nil): the master
// expires it, and the process, never told, serves on until its
// self-fence deadline, and cannot come back as a new incarnation.
func loseHeartbeats(h *harness, ref domain.ServerRef, start <-chan struct{}) {
	h.faults.MustAdd(rpcfault.Rule{
		Name:    "test: " + ref.String() + "'s heartbeats lost",
		Methods: []string{rspb.Master_Heartbeat_FullMethodName, rspb.Master_RegisterServer_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			switch req := c.Request.(type) {
			case *rspb.HeartbeatRequest:
				if req.GetServerId() != ref.ID || req.GetStartCode() != ref.StartCode {
					return false
				}
			case *rspb.RegisterServerRequest:
				if req.GetServerId() != ref.ID {
					return false
				}
			default:
				return false
			}
			if start == nil {
				return true
			}
			select {
			case <-start:
				return true
			default:
				return false
			}
		},
	})
}

// opensTo lists the regions of the opens a master sends incarnation ref
// in call c (none if c is not such a call).
func opensTo(c rpcfault.Call, ref domain.ServerRef) []string {
	b, ok := c.Request.(*rspb.BatchRequest)
	if !ok || c.Side != rpcfault.Client || b.GetServerId() != ref.ID || b.GetStartCode() != ref.StartCode {
		return nil
	}
	var out []string
	for _, op := range b.GetOps() {
		if op.GetKind() == rspb.OpKind_OP_KIND_OPEN {
			out = append(out, op.GetRegion())
		}
	}
	return out
}

// The target opens the batch's regions and says so, but its answer
// arrives only once its expiry has committed (the first answer is held
// until then, and its heartbeats are lost from that first answer on):
// the batch counts none of it, and hands every region on.
func TestCrashBatchCountsNoAnswerOfAFencedTarget(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, domain: func(c *domain.Config) {
		c.CrashBatch = 2
		// The batch waits for the held answer rather than give up on it.
		c.DispatchTimeout = time.Minute
		// The target's crash fails its in-flight ops only after its
		// self-fence deadline and this margin: the answer, let through
		// once the expiry commits, reaches the batch before.
		c.FenceMargin = 2 * time.Second
	}})
	per, victim := openTable(t, h, regions)
	target := otherServer(per, victim)
	ref := domain.ServerRef{ID: target, StartCode: h.rs(target).StartCode()}
	m, _ := h.leader()
	fence := watchFence(t, m.node.FSM(), ref)
	answered := make(chan struct{})
	var once sync.Once
	loseHeartbeats(h, ref, answered)
	h.faults.MustAdd(rpcfault.Rule{
		Name:    "test: " + target + "'s open answers held until its expiry commits",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropAnswer,
		WhenAnswer: func(c rpcfault.Call, _ any, err error) bool {
			if err != nil || len(opensTo(c, ref)) == 0 {
				return false
			}
			once.Do(func() { close(answered) })
			select {
			case <-fence.expired:
			case <-time.After(time.Minute):
			}
			return false // delivered, once the expiry is in
		},
	})
	h.stopRS(victim)
	select {
	case <-answered:
	case <-time.After(time.Minute):
		t.Fatalf("%s answered no open: no batch went to it (the case is not reached)", target)
	}
	crashOf(t, h, victim, 2*time.Minute)
	crashOf(t, h, target, 2*time.Minute)
	testwait.For(t, 2*time.Minute, "every region open once", func() bool {
		problems, _ := h.tableOpenProblems("default:t", regions)
		return len(problems) == 0
	})
	fence.check(t)
	if !strings.Contains(h.c.Logs("m1"), "batch of crashed regions settled in part") {
		t.Error("no batch handed a region on: the case (its target fenced) is not reached")
	}
	h.checkNoDoubles()
}

// The target is fenced after its batches were written and before their
// opens go out (held at their fail point until its expiry commits, while
// it still runs): no batch sends it an open; their regions go to
// assignments of their own, which open them elsewhere once it has
// stopped serving.
func TestCrashBatchSendsNoOpenToAFencedTarget(t *testing.T) {
	const regions = 12
	hold := newOpenHold(t)
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, domain: func(c *domain.Config) {
		// The crash of the target removes it from the dispatcher (whose
		// sends then fail before the wire) only after its self-fence
		// deadline and this margin: the batches, let go when its expiry
		// commits, would reach the running process meanwhile.
		c.FenceMargin = 2 * time.Second
		c.CrashBatch = 2
		c.FailPoint = hold.failPoint
	}})
	_, victim := openTable(t, h, regions)
	m, batches := hold.crashBatches(t, h, victim)
	ref := batches[0].Target
	fence := watchFence(t, m.node.FSM(), ref)
	var (
		sentMu sync.Mutex
		sent   []string
	)
	h.faults.MustAdd(rpcfault.Rule{
		Name:    "test: opens sent to " + ref.String() + " once it is fenced",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			select {
			case <-fence.expired:
			default:
				return false
			}
			if rs := opensTo(c, ref); len(rs) > 0 {
				sentMu.Lock()
				sent = append(sent, rs...)
				sentMu.Unlock()
			}
			return false // only counted
		},
	})
	loseHeartbeats(h, ref, nil)
	select {
	case <-fence.expired:
	case <-time.After(time.Minute):
		t.Fatalf("%s never expired with its heartbeats lost", ref)
	}
	hold.release()
	crashOf(t, h, victim, 2*time.Minute)
	crashOf(t, h, ref.ID, 2*time.Minute)
	testwait.For(t, 2*time.Minute, "every region open once", func() bool {
		problems, _ := h.tableOpenProblems("default:t", regions)
		return len(problems) == 0
	})
	sentMu.Lock()
	if len(sent) > 0 {
		t.Errorf("opens of %v sent to %s after its expiry committed", sent, ref)
	}
	sentMu.Unlock()
	fence.check(t)
	if !strings.Contains(h.c.Logs("m1"), "batch of crashed regions settled in part") {
		t.Error("no batch handed a region on: the case (its target fenced) is not reached")
	}
	h.checkNoDoubles()
}
