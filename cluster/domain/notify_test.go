package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/procedure"
)

// The domain's waits run out on its clock, not on the wall's.
func TestWaitsFollowTheDomainClock(t *testing.T) {
	mc := clock.NewManual(time.Unix(0, 0))
	d, err := New(Config{Clock: mc})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	expired, stop := d.after(time.Second)
	defer stop()
	ctx, cancel := d.withTimeout(context.Background(), time.Second)
	defer cancel()
	select {
	case <-expired:
		t.Fatal("after fired before the clock moved")
	case <-ctx.Done():
		t.Fatal("withTimeout ran out before the clock moved")
	default:
	}
	mc.Advance(time.Second)
	<-expired
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("cause %v, want DeadlineExceeded", cause)
	}
}

// A watcher is woken by its own procedure's transition only, and an
// unwatched one is forgotten.
func TestWatchProcWakesOnTransition(t *testing.T) {
	s := &services{}
	one, unwatchOne := s.watchProc(1)
	two, unwatchTwo := s.watchProc(2)
	defer unwatchOne()
	s.onTransition(procedure.Change{ID: 1})
	select {
	case <-one:
	default:
		t.Fatal("watcher of 1 not woken by 1's transition")
	}
	select {
	case <-two:
		t.Fatal("watcher of 2 woken by 1's transition")
	default:
	}
	unwatchTwo()
	if len(s.watchers) != 0 {
		t.Errorf("watchers left: %v", s.watchers)
	}
	s.onTransition(procedure.Change{ID: 2}) // nothing to wake, nothing to close twice
}
