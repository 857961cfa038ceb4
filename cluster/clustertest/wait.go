package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// WaitFor fails the test unless cond holds within the cluster's
// WaitTimeout; what names the condition in the failure. Test goroutine
// only.
func (c *Cluster) WaitFor(what string, cond func() bool) {
	c.t.Helper()
	testwait.For(c.t, c.cfg.WaitTimeout, what, cond)
}

// WaitForNil is WaitFor for a check that says why the condition does not
// hold yet; its last answer is in the failure.
func (c *Cluster) WaitForNil(what string, check func() error) {
	c.t.Helper()
	testwait.ForNil(c.t, c.cfg.WaitTimeout, what, check)
}

// LeaderNow returns the one running master, not excluded, that leads with
// a running executor (and, with the domain, its leader services), or -1
// if there is none or more than one claims it (the old leader has not
// noticed yet).
func (c *Cluster) LeaderNow(exclude ...int) (int, *procedure.Executor) {
	li, found := -1, 0
	var lx *procedure.Executor
	for i, m := range c.masters {
		if slices.Contains(exclude, i) {
			continue
		}
		// A master whose executor runs but whose services do not yet
		// counts as a claim: it is not "no leader", and must not be
		// mistaken for one when another master leads.
		x, ok := m.leader()
		if x == nil {
			continue
		}
		found++
		if ok {
			li, lx = i, x
		}
	}
	if found != 1 || lx == nil {
		return -1, nil
	}
	return li, lx
}

// WaitLeader waits until exactly one running master, other than those
// excluded, leads with a running executor (and, with the domain, its
// leader services), and returns its index and executor. Test goroutine
// only.
func (c *Cluster) WaitLeader(exclude ...int) (int, *procedure.Executor) {
	c.t.Helper()
	var li int
	var lx *procedure.Executor
	testwait.For(c.t, c.cfg.WaitTimeout, "a single leader with a running executor", func() bool {
		li, lx = c.LeaderNow(exclude...)
		return lx != nil
	})
	return li, lx
}

// Leader is WaitLeader's master.
func (c *Cluster) Leader() *Master {
	c.t.Helper()
	li, _ := c.WaitLeader()
	return c.masters[li]
}

// Submit submits p on the leader with nonce (none if empty), retrying
// across leadership changes, and returns its id. Test goroutine only.
func (c *Cluster) Submit(p procedure.Procedure, nonce string) uint64 {
	c.t.Helper()
	var id uint64
	testwait.ForNil(c.t, c.cfg.WaitTimeout, fmt.Sprintf("submission of %T", p), func() error {
		_, x := c.LeaderNow()
		if x == nil {
			return errors.New("no leader")
		}
		var err error
		id, err = x.Submit(p, procedure.SubmitOptions{Nonce: nonce, Owner: "test"})
		return err
	})
	return id
}

// Wait waits up to d for root procedure id to end, following leadership
// changes, and returns its final state. Test goroutine only.
func (c *Cluster) Wait(id uint64, d time.Duration) procedure.Info {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, x := c.WaitLeader()
		if time.Now().After(deadline) {
			w, _ := x.Why(id)
			c.t.Fatalf("clustertest: procedure %d did not finish within %v: %+v", id, d, w)
		}
		// A short wait per attempt, so that a leadership change is
		// noticed and the wait moves to the new leader.
		ctx, cancel := context.WithTimeout(context.Background(), min(500*time.Millisecond, time.Until(deadline)+time.Millisecond))
		info, err := x.Wait(ctx, id)
		cancel()
		if err == nil && info.State.Terminal() {
			return info
		}
		if err != nil && !leadershipMoved(err) {
			c.t.Fatalf("clustertest: wait %d: %v", id, err)
		}
	}
}

// MustSucceed is Wait, failing the test unless the procedure succeeded.
func (c *Cluster) MustSucceed(id uint64, d time.Duration) procedure.Info {
	c.t.Helper()
	info := c.Wait(id, d)
	if info.State != procedure.Success {
		c.t.Fatalf("clustertest: procedure %d (%s) ended %v: %s", id, info.Type, info.State, info.Error)
	}
	return info
}

// leadershipMoved reports whether err, from an executor's Wait, means only
// that this executor can no longer answer (it stopped, its store failed
// because its node lost leadership, the procedure is not loaded there
// yet): the next leader resumes the procedure from the store.
func leadershipMoved(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, procedure.ErrStopped) ||
		errors.Is(err, procedure.ErrNotStarted) || errors.Is(err, procedure.ErrNotFound) ||
		errors.Is(err, procedure.ErrStoreFailed) || errors.Is(err, cluster.ErrNotLeader)
}
