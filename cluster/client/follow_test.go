package client_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// try is one attempt Follow made: where, and when after the start.
type try struct {
	addr string
	at   time.Duration
}

func noLeader() error { return status.Error(codes.Unavailable, "no leader") }

func hintTo(t *testing.T, addr string) error {
	t.Helper()
	st, err := status.New(codes.Unavailable, "not the leader").WithDetails(&adminpb.LeaderHint{LeaderAdminAddress: addr})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// Follow's schedule on clock.Real in a synctest bubble, where that clock is
// fake and an attempt takes no time, so each attempt's moment is exact: a
// pause starts at MinBackoff and doubles up to MaxBackoff, a hint is
// followed at once but at most HintLimit times in a row (the next one
// pauses, without resetting the doubling), and a failure of the hinted
// leader moves on to the address after it.
func TestFollowBacksOffOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := client.NewLeaderTracker([]string{"a", "b", "c"})
		p := client.FollowPolicy{MinBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, HintLimit: 2}
		var pauses []time.Duration
		p.OnRetry = func(_ string, _ error, hinted bool, pause time.Duration) {
			if !hinted {
				pauses = append(pauses, pause)
			}
		}
		answers := []error{
			noLeader(),     // a
			hintTo(t, "c"), // b: followed at once
			hintTo(t, "a"), // c: followed at once
			hintTo(t, "b"), // a: a third hint in a row waits
			noLeader(),     // b
			noLeader(),     // c
			nil,            // a
		}
		start := time.Now()
		var tries []try
		f := tr.Follow(context.Background(), p, func(addr string) error {
			tries = append(tries, try{addr, time.Since(start)})
			err := answers[0]
			answers = answers[1:]
			return err
		})
		if f != nil {
			t.Fatalf("Follow failed: %+v", f)
		}
		ms := time.Millisecond
		want := []try{{"a", 0}, {"b", 50 * ms}, {"c", 50 * ms}, {"a", 50 * ms}, {"b", 150 * ms}, {"c", 350 * ms}, {"a", 650 * ms}}
		if !slices.Equal(tries, want) {
			t.Fatalf("tries %v, want %v", tries, want)
		}
		if want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 300 * ms}; !slices.Equal(pauses, want) {
			t.Fatalf("pauses %v, want %v", pauses, want)
		}
		if tr.Leader() != "a" {
			t.Fatalf("leader %q", tr.Leader())
		}
	})
}

// A pause ends with the caller's context, at exactly its deadline: Follow
// neither waits out the pause nor makes another attempt.
func TestFollowStopsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := client.NewLeaderTracker([]string{"a", "b"})
		p := client.FollowPolicy{MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}
		const deadline = 120 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		var tries []try
		f := tr.Follow(ctx, p, func(addr string) error {
			tries = append(tries, try{addr, time.Since(start)})
			return noLeader()
		})
		if took := time.Since(start); took != deadline {
			t.Fatalf("Follow returned after %v, want %v", took, deadline)
		}
		if want := []try{{"a", 0}, {"b", 50 * time.Millisecond}}; !slices.Equal(tries, want) {
			t.Fatalf("tries %v, want %v", tries, want)
		}
		if f == nil || f.Err != nil || status.Code(f.Last) != codes.Unavailable || !slices.Equal(f.Tried, []string{"a", "b"}) {
			t.Fatalf("failure %+v", f)
		}
	})
}

// A forward's answer names the leader (adminpb.LeaderHeader): the tracker
// moves there only from the address it was targeting, and only to one of
// the addresses it was given; a name it learnt from a hint, or never
// heard of, may not be reachable from this caller.
func TestRedirectedOnlyToAGivenAddress(t *testing.T) {
	tr := client.NewLeaderTracker([]string{"a:1", "b:1", "c:1"})
	if tr.Redirected(tr.Target(), "elsewhere:1") {
		t.Fatal("moved to an address it was not given")
	}
	if tr.Redirected("b:1", "c:1") {
		t.Fatal("moved on an answer from an address it was not targeting")
	}
	if tr.Redirected("a:1", "a:1") || tr.Redirected("a:1", "") {
		t.Fatal("moved to where it was, or to no address")
	}
	if !tr.Redirected("a:1", "c:1") || tr.Target() != "c:1" {
		t.Fatalf("target %s, want c:1", tr.Target())
	}
	// A hinted leader is added to the addresses but not to those given.
	tr.Failed("c:1", hintTo(t, "hinted:1"))
	if tr.Target() != "hinted:1" {
		t.Fatalf("target %s after the hint, want hinted:1", tr.Target())
	}
	tr.Failed("hinted:1", noLeader())
	tr.Succeeded("a:1")
	if tr.Redirected("a:1", "hinted:1") || tr.Target() != "a:1" {
		t.Fatalf("moved to a hinted address: target %s", tr.Target())
	}
}
