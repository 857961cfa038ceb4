package chaos

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The bound is the sum of its stated terms, each one of the system's
// timeouts (none zero), and the summary renders all of them.
func TestLivenessBoundIsItsTerms(t *testing.T) {
	var sum time.Duration
	for _, term := range livenessTerms() {
		if term.d <= 0 {
			t.Errorf("term %q is %v", term.what, term.d)
		}
		sum += term.d
		if !strings.Contains(livenessDerivation(), term.what) {
			t.Errorf("the derivation leaves out %q", term.what)
		}
	}
	if sum != livenessBound {
		t.Fatalf("livenessBound %v, its terms sum to %v", livenessBound, sum)
	}
	// By the defaults today: 4.5 s + 15.5 s + 7 s + 40 s + 10 s + 30 s.
	if livenessBound != 107*time.Second {
		t.Fatalf("livenessBound %v: a default changed; update the comment and the docs", livenessBound)
	}
}

func proc(id uint64, state, why, data string) *adminpb.Procedure {
	return &adminpb.Procedure{Id: id, Type: "TransitRegionState", State: state, WaitingFor: why, Data: []byte(data)}
}

func TestWaitsOnLive(t *testing.T) {
	live := map[string]uint64{"rs1": 11, "rs2": 22}
	ps := []*adminpb.Procedure{
		proc(1, client.StateWaitingTimeout, "waiting for event", `{"region":"r1","server":{"id":"rs1","start_code":11}}`),
		proc(2, client.StateWaitingTimeout, "waiting for event", `{"server":{"id":"rs1","start_code":10}}`), // an old incarnation
		proc(3, client.StateWaiting, "waiting for event", `{"server":{"id":"rs3","start_code":33}}`),        // not live
		proc(4, client.StateWaiting, "waiting for children: procedure 9: x", `{"server":{"id":"rs2","start_code":22}}`),
		proc(5, client.StateWaiting, "waiting for lock region r (exclusive) held by procedure 3", `{"server":{"id":"rs2","start_code":22}}`),
		proc(6, client.StateRunnable, "queued", `{"server":{"id":"rs2","start_code":22}}`),
		proc(7, client.StateWaitingTimeout, "retrying after an error", `{"server":{"id":"rs2","start_code":22}}`),
		proc(8, client.StateWaiting, "waiting for event", `not json`),
		proc(9, client.StateWaiting, "waiting for event", `{"table":"t"}`),
	}
	got := waitsOnLive(ps, live)
	if len(got) != 2 || !strings.HasPrefix(got[0], "1 TransitRegionState WAITING_TIMEOUT on rs1/11") || !strings.HasPrefix(got[1], "7 ") {
		t.Fatalf("waitsOnLive = %q; want procedures 1 and 7", got)
	}
}

func TestAckedPending(t *testing.T) {
	a := newAcked()
	a.add(3, "c")
	a.add(1, "a")
	a.add(2, "b")
	a.done(2)
	if got := a.pending(); !reflect.DeepEqual(got, []uint64{1, 3}) {
		t.Fatalf("pending %v, want [1 3]", got)
	}
	if a.count() != 3 || a.what(3) != "c" {
		t.Fatalf("count %d, what(3) %q", a.count(), a.what(3))
	}
}

// script plays rounds: each a map of unmet conditions and doubles.
type script struct {
	rounds []map[string][]string
	dbl    [][]string
	n      int
}

func (s *script) round(context.Context) (map[string][]string, []string) {
	i := min(s.n, len(s.rounds)-1)
	s.n++
	var d []string
	if i < len(s.dbl) {
		d = s.dbl[i]
	}
	return s.rounds[i], d
}

// Each condition's time is from the heal to the first round after the
// last one that found it unmet; converge stops once all hold together.
func TestConvergeTimesEachCondition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{rounds: []map[string][]string{
			{condServers: {"rs1 not live"}, condAcked: {"5"}, condRegions: {"x"}, condNoneOpen: {"5"}},
			{condAcked: {"5"}, condRegions: {"x"}, condNoneOpen: {"5"}},
			{condAcked: {"5"}, condNoneOpen: {"5"}, condWaitLive: {"5 on rs1"}}, // waits again
			{condNoneOpen: {"5"}},
			{},
		}}
		healed := time.Now()
		cv := converge(context.Background(), s.round, healed, time.Minute)
		step := 250 * time.Millisecond
		want := map[string]time.Duration{condServers: step, condRegions: 2 * step, condWaitLive: 3 * step, condAcked: 3 * step, condNoneOpen: 4 * step}
		if !reflect.DeepEqual(cv.took, want) || len(cv.unmet) != 0 {
			t.Fatalf("took %v unmet %v; want %v", cv.took, cv.unmet, want)
		}
	})
}

// At the bound, what still fails is unmet; what held stays timed.
func TestConvergeStopsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{rounds: []map[string][]string{{condAcked: {"7 (create t) RUNNABLE: queued"}}}}
		cv := converge(context.Background(), s.round, time.Now(), 10*time.Second)
		if _, ok := cv.took[condAcked]; ok || len(cv.unmet[condAcked]) != 1 {
			t.Fatalf("took %v unmet %v; want acknowledged procedures unmet", cv.took, cv.unmet)
		}
		if d := cv.took[condServers]; d != 0 {
			t.Fatalf("a condition that held from the first round took %v", d)
		}
		if len(cv.took) != len(convergenceConds)-1 {
			t.Fatalf("took %v", cv.took)
		}
	})
}

// A region found open twice in two reads in a row ends the phase; once
// only (a move half seen) does not.
func TestConvergeDoubleTwiceInARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unmet := map[string][]string{condRegions: {"region r open on [rs1 rs2]"}}
		s := &script{rounds: []map[string][]string{unmet, unmet, unmet, unmet},
			dbl: [][]string{{"region r open on [rs1 rs2]"}, nil, {"region r open on [rs1 rs2]"}, {"region r open on [rs1 rs2]"}}}
		cv := converge(context.Background(), s.round, time.Now(), time.Minute)
		if !reflect.DeepEqual(cv.doubles, []string{"region r open on [rs1 rs2]"}) || s.n != 4 {
			t.Fatalf("doubles %v after %d rounds; want one after 4", cv.doubles, s.n)
		}
	})
}
