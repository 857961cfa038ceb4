package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
)

// The autopilot loop on fake time (testing/synctest): when its looks fall
// and what it carries from one to the next, against a fake cluster whose
// members the test makes healthy or silent at chosen moments. The plan's
// decisions for given inputs are TestAutopilotPlan's.

// fakeAutopilotCluster is an autopilotCluster whose members are healthy,
// or silent since a moment, as the test says.
type fakeAutopilotCluster struct {
	clk clock.Clock

	mu      sync.Mutex
	servers []raft.Server
	silent  map[raft.ServerID]time.Time // silent since; absent: healthy
	events  []string                    // "promote m3 @12s", relative to t0
	t0      time.Time
}

func newFakeAutopilotCluster(voters, nonvoters []string) *fakeAutopilotCluster {
	f := &fakeAutopilotCluster{clk: clock.Real{}, silent: map[raft.ServerID]time.Time{}, t0: time.Now()}
	for _, id := range voters {
		f.add(id, raft.Voter)
	}
	for _, id := range nonvoters {
		f.add(id, raft.Nonvoter)
	}
	return f
}

func (f *fakeAutopilotCluster) add(id string, s raft.ServerSuffrage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = append(f.servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1"), Suffrage: s})
}

// setSilent makes id stop answering now (true), or answer again (false).
func (f *fakeAutopilotCluster) setSilent(id string, silent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if silent {
		f.silent[raft.ServerID(id)] = f.clk.Now()
	} else {
		delete(f.silent, raft.ServerID(id))
	}
}

func (f *fakeAutopilotCluster) look(_ context.Context, now time.Time) ([]autopilotMember, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []autopilotMember
	for _, srv := range f.servers {
		p := PeerProgress{MatchKnown: true, LastContact: now, Healthy: true}
		if since, ok := f.silent[srv.ID]; ok {
			p.LastContact, p.Healthy = since, false
		}
		out = append(out, autopilotMember{Server: srv, Progress: p})
	}
	return out, true, nil
}

func (f *fakeAutopilotCluster) promote(_ context.Context, _ []raft.Server, srv raft.Server) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.servers {
		if f.servers[i].ID == srv.ID {
			f.servers[i].Suffrage = raft.Voter
		}
	}
	f.events = append(f.events, "promote "+string(srv.ID)+" @"+f.clk.Now().Sub(f.t0).String())
	return nil
}

func (f *fakeAutopilotCluster) remove(_ context.Context, srv raft.Server, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.servers {
		if f.servers[i].ID == srv.ID {
			f.servers = append(f.servers[:i], f.servers[i+1:]...)
			break
		}
	}
	f.events = append(f.events, "remove "+string(srv.ID)+" @"+f.clk.Now().Sub(f.t0).String())
	return nil
}

// said is what the autopilot did so far, in order.
func (f *fakeAutopilotCluster) said() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.events, "; ")
}

// startAutopilot runs an autopilot on f as leader m0 (looking every
// second: 10 s stabilization, the default HealthInterval), until the test
// ends. Its first look is at t0+1s.
func startAutopilot(t *testing.T, f *fakeAutopilotCluster, deadAfter time.Duration, minQuorum int) *autopilotStats {
	t.Helper()
	stats := &autopilotStats{}
	a := &autopilot{
		cl: f, clk: f.clk, interval: time.Second, stats: stats, log: hclog.NewNullLogger(),
		lim: autopilotLimits{Stabilization: 10 * time.Second, DeadAfter: deadAfter, MinQuorum: minQuorum, Self: "m0"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return stats
}

// checkSaid fails the test unless the autopilot did exactly want by now.
func checkSaid(t *testing.T, f *fakeAutopilotCluster, when, want string) {
	t.Helper()
	if got := f.said(); got != want {
		t.Fatalf("%s: autopilot did %q, want %q", when, got, want)
	}
}

// TestAutopilotLoopPromotesAfterStabilization: a non-voter that joins at
// 2.5 s is first seen healthy by the look at 3 s and promoted by the
// first look 10 s later (13 s), not a nanosecond before, however loaded
// the machine.
func TestAutopilotLoopPromotesAfterStabilization(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAutopilotCluster([]string{"m0", "m1", "m2"}, nil)
		stats := startAutopilot(t, f, 0, 3)
		testwait.FakeTimeTo(f.t0, 2500*time.Millisecond)
		f.add("m3", raft.Nonvoter)
		testwait.FakeTimeTo(f.t0, 13*time.Second-time.Nanosecond)
		checkSaid(t, f, "just before 13 s", "")
		testwait.FakeTimeTo(f.t0, 13*time.Second)
		checkSaid(t, f, "at 13 s", "promote m3 @13s")
		if got := stats.promotions.Load(); got != 1 {
			t.Errorf("promotions counted %d, want 1", got)
		}
		testwait.FakeTimeTo(f.t0, 14*time.Second)
		seen, ok := stats.lastLook()
		if !ok || seen[memberKind{raft.Voter, true}] != 4 || seen[memberKind{raft.Nonvoter, true}] != 0 {
			t.Errorf("last look's members %v (ok %v), want 4 healthy voters", seen, ok)
		}
	})
}

// TestAutopilotLoopHealthClockRestarts: a non-voter seen healthy from
// 1 s, unhealthy by the look at 8 s, healthy again by the look at 9 s,
// counts its stabilization from 9 s: promoted at 19 s, not at 11 s.
func TestAutopilotLoopHealthClockRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAutopilotCluster([]string{"m0", "m1", "m2"}, []string{"m3"})
		startAutopilot(t, f, 0, 3)
		testwait.FakeTimeTo(f.t0, 7500*time.Millisecond)
		f.setSilent("m3", true)
		testwait.FakeTimeTo(f.t0, 8500*time.Millisecond)
		f.setSilent("m3", false)
		testwait.FakeTimeTo(f.t0, 11*time.Second)
		checkSaid(t, f, "at 11 s, 10 s after it was first seen healthy", "")
		testwait.FakeTimeTo(f.t0, 19*time.Second-time.Nanosecond)
		checkSaid(t, f, "just before 19 s", "")
		testwait.FakeTimeTo(f.t0, 19*time.Second)
		checkSaid(t, f, "at 19 s", "promote m3 @19s")
	})
}

// TestAutopilotLoopRemovesADeadVoterOnlyPastTheTimeoutWithAReplacement:
// with --dead-member-timeout 30s and --min-quorum 3, a voter silent from
// 5.5 s stays while only two other voters are healthy, long past its
// timeout; a replacement joining at 60.5 s is promoted at 71 s, and the
// dead voter goes at the next look (72 s), which leaves three voters.
// When another voter then dies, nothing more is removed: that would leave
// two.
func TestAutopilotLoopRemovesADeadVoterOnlyPastTheTimeoutWithAReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAutopilotCluster([]string{"m0", "m1", "m2"}, nil)
		stats := startAutopilot(t, f, 30*time.Second, 3)
		testwait.FakeTimeTo(f.t0, 5500*time.Millisecond)
		f.setSilent("m2", true)
		testwait.FakeTimeTo(f.t0, 60500*time.Millisecond)
		checkSaid(t, f, "without a replacement", "")
		f.add("m3", raft.Nonvoter)
		testwait.FakeTimeTo(f.t0, 72*time.Second-time.Nanosecond)
		checkSaid(t, f, "just before 72 s", "promote m3 @1m11s")
		testwait.FakeTimeTo(f.t0, 72*time.Second)
		checkSaid(t, f, "at 72 s", "promote m3 @1m11s; remove m2 @1m12s")
		if p, r := stats.promotions.Load(), stats.removals.Load(); p != 1 || r != 1 {
			t.Errorf("counted %d promotions and %d removals, want 1 and 1", p, r)
		}

		f.setSilent("m1", true)
		testwait.FakeTimeTo(f.t0, time.Hour)
		checkSaid(t, f, "an hour on, m1 dead too", "promote m3 @1m11s; remove m2 @1m12s")
		seen, _ := stats.lastLook()
		if seen[memberKind{raft.Voter, true}] != 2 || seen[memberKind{raft.Voter, false}] != 1 {
			t.Errorf("last look's members %v, want 2 healthy voters and 1 unhealthy", seen)
		}
	})
}

// TestAutopilotLoopRemovesADeadVoterAtItsTimeout: with a replacement
// ready (four voters), a voter silent from 5.5 s is removed by the first
// look more than 30 s later: at 36 s, not at 35 s.
func TestAutopilotLoopRemovesADeadVoterAtItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAutopilotCluster([]string{"m0", "m1", "m2", "m3"}, nil)
		startAutopilot(t, f, 30*time.Second, 3)
		testwait.FakeTimeTo(f.t0, 5500*time.Millisecond)
		f.setSilent("m2", true)
		testwait.FakeTimeTo(f.t0, 36*time.Second-time.Nanosecond)
		checkSaid(t, f, "just before 36 s", "")
		testwait.FakeTimeTo(f.t0, 36*time.Second)
		checkSaid(t, f, "at 36 s", "remove m2 @36s")
	})
}

// TestAutopilotLoopForgetsWhatItSawWhenItStops: a stopped autopilot (its
// leadership over) leaves no member counts for the metrics to report.
func TestAutopilotLoopForgetsWhatItSawWhenItStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAutopilotCluster([]string{"m0"}, nil)
		stats := &autopilotStats{}
		a := &autopilot{cl: f, clk: f.clk, interval: time.Second, stats: stats, log: hclog.NewNullLogger(),
			lim: autopilotLimits{Stabilization: 10 * time.Second, MinQuorum: 1, Self: "m0"}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.run(ctx)
		}()
		testwait.FakeTimeTo(f.t0, time.Second)
		if _, ok := stats.lastLook(); !ok {
			t.Fatal("no members seen after the first look")
		}
		cancel()
		<-done
		if seen, ok := stats.lastLook(); ok {
			t.Fatalf("a stopped autopilot still reports %v", seen)
		}
	})
}

// TestAutopilotIntervalHasAFloorAtNoStabilization: a stabilization time
// of none (--server-stabilization-time 0 reaches the node as 1 ns) or a
// negative one (non-voter joins off) must not make the leader read its
// configuration every 5 ms; a short one (tests) still speeds looks up.
func TestAutopilotIntervalHasAFloorAtNoStabilization(t *testing.T) {
	for _, c := range []struct {
		stab, want time.Duration
	}{
		{-1, time.Second},
		{0, time.Second},
		{time.Nanosecond, time.Second},
		{20 * time.Millisecond, time.Second}, // a fifth is under the floor
		{100 * time.Millisecond, 20 * time.Millisecond},
		{10 * time.Second, time.Second},
	} {
		n := &Node{cfg: Config{HealthInterval: time.Second, ServerStabilizationTime: c.stab}}
		if got := n.autopilotInterval(); got != c.want {
			t.Errorf("stabilization %v: interval %v, want %v", c.stab, got, c.want)
		}
	}
}
