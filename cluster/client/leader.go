package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/proto/adminpb"
)

// LeaderTracker decides where a leader-following caller sends its next
// attempt: to the believed leader; after a failure to the leader named by a
// LeaderHint in the error, else to the address after the failed one. The
// Client uses it for admin calls, region servers for their calls to the
// masters. It is safe for concurrent use.
type LeaderTracker struct {
	mu     sync.Mutex
	addrs  []string // the given addresses, then hinted ones
	given  int      // how many of addrs were given
	leader string   // believed leader's address; "" if unknown
	next   int      // index in addrs of the next address to try without a leader
}

// NewLeaderTracker starts with no leader known; addrs must not be empty.
func NewLeaderTracker(addrs []string) *LeaderTracker {
	return &LeaderTracker{addrs: slices.Clone(addrs), given: len(addrs)}
}

// Redirected records that a call answered at from was served by the leader
// at leader (adminpb.LeaderHeader), and makes leader the next target if it
// is one of the given addresses: a name this caller was told it can
// reach. Another name (the leader's own view of its address) is left
// alone, and from stays the target: calls there keep being forwarded, as
// they were answered. Reports whether the target moved.
func (t *LeaderTracker) Redirected(from, leader string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if leader == "" || leader == from || t.targetLocked() != from || !slices.Contains(t.addrs[:t.given], leader) {
		return false
	}
	t.leader = leader
	return true
}

// Target is the address of the next attempt.
func (t *LeaderTracker) Target() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.targetLocked()
}

func (t *LeaderTracker) targetLocked() string {
	if t.leader != "" {
		return t.leader
	}
	return t.addrs[t.next%len(t.addrs)]
}

// size is how many addresses the tracker knows (given and hinted).
func (t *LeaderTracker) size() int {
	return locked.Call(&t.mu, func() int { return len(t.addrs) })
}

// Leader is the believed leader's address, "" if unknown.
func (t *LeaderTracker) Leader() string { return locked.Load(&t.mu, &t.leader) }

// Succeeded records that addr answered a call: it is the leader.
func (t *LeaderTracker) Succeeded(addr string) {
	t.mu.Lock()
	t.leader = addr
	t.mu.Unlock()
}

// Failed records that addr could not serve a call and reports whether err
// named another leader, which the next attempt then goes to.
func (t *LeaderTracker) Failed(addr string, err error) (hinted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := LeaderHint(err); h != "" && h != addr {
		if !slices.Contains(t.addrs, h) {
			t.addrs = append(t.addrs, h)
		}
		t.leader = h
		return true
	}
	if t.leader == addr || t.leader == "" {
		t.leader = ""
		if i := slices.Index(t.addrs, addr); i >= 0 {
			t.next = i + 1
		} else {
			t.next++
		}
	}
	return false
}

// FollowPolicy says how LeaderTracker.Follow retries.
type FollowPolicy struct {
	// MinBackoff and MaxBackoff bound the pause after an attempt that found
	// no leader: it starts at the minimum and doubles up to the maximum.
	MinBackoff, MaxBackoff time.Duration
	// HintLimit bounds the leader hints followed in a row without a pause,
	// so that standbys whose stale hints name each other cannot make the
	// caller spin; 0 sets no bound.
	HintLimit int
	// Clock times the pauses; nil is the wall clock.
	Clock clock.Clock
	// OnRetry, if set, is told of each failed attempt that is retried:
	// whether a hint is followed at once, else the pause before the next.
	OnRetry func(addr string, err error, hinted bool, pause time.Duration)
	// Permanent, if set, says whether an attempt's error will not change
	// by waiting (a refused connection, a name that does not resolve, a
	// TLS mismatch). Once every address known has last failed that way,
	// Follow gives up (FollowFailure.Permanent) instead of retrying until
	// ctx ends. One address that answers, even "no leader yet", keeps it
	// waiting: a dead leader's refused port during an election is not a
	// reason to give up.
	Permanent func(err error) bool
}

// FollowFailure is why Follow gave up: either Addr answered Err, which is
// not Retryable, or ctx ended (Err is nil). Tried lists the addresses that
// failed retryably, Last the last such error (nil if none did), and Errs
// each address's last error, so that a caller can say why each failed
// rather than only why the last did.
type FollowFailure struct {
	Addr  string
	Err   error
	Tried []string
	Last  error
	Errs  map[string]error
	// Permanent is set when Follow gave up because every address known
	// last failed with an error FollowPolicy.Permanent calls permanent.
	Permanent bool
}

// allPermanent reports whether every address t knows has failed in f,
// its last error permanent by p.
func (t *LeaderTracker) allPermanent(f *FollowFailure, p FollowPolicy) bool {
	if p.Permanent == nil {
		return false
	}
	t.mu.Lock()
	addrs := slices.Clone(t.addrs)
	t.mu.Unlock()
	for _, a := range addrs {
		err, ok := f.Errs[a]
		if !ok || !p.Permanent(err) {
			return false
		}
	}
	return true
}

// noteTry records how addr's try failed. A try that ctx's end cut short
// failed by that end (gRPC may report it as a closed connection), not by
// anything addr did: what addr answered to an earlier try, if anything,
// stays its account ("not the leader" says more than the deadline that
// cut the try after it).
func (f *FollowFailure) noteTry(ctx context.Context, addr string, err error) {
	if ctx.Err() != nil {
		err = status.FromContextError(ctx.Err()).Err()
		if _, answered := f.Errs[addr]; answered {
			err = f.Errs[addr]
		}
	}
	f.Errs[addr] = err
	if !slices.Contains(f.Tried, addr) {
		f.Tried = append(f.Tried, addr)
	}
}

// Follow calls attempt with each try's address (Target) until it succeeds,
// fails with an error that is not Retryable, or ctx ends, recording each
// outcome (Succeeded, Failed). A hinted leader is tried at once; otherwise
// Follow backs off. It returns nil on success. The Client's calls and
// region servers' calls to the masters both follow the leader this way.
func (t *LeaderTracker) Follow(ctx context.Context, p FollowPolicy, attempt func(addr string) error) *FollowFailure {
	clk := p.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	pause := p.MinBackoff
	hints := 0 // followed in a row
	f := &FollowFailure{Errs: map[string]error{}}
	for {
		if ctx.Err() != nil {
			return f
		}
		addr := t.Target()
		err := attempt(addr)
		if err == nil {
			t.Succeeded(addr)
			return nil
		}
		if !Retryable(ctx, err) {
			f.Addr, f.Err = addr, err
			if ctx.Err() != nil && f.Last != nil {
				f.noteTry(ctx, addr, err)
			}
			return f
		}
		f.Last = err
		f.noteTry(ctx, addr, err)
		if t.allPermanent(f, p) {
			f.Permanent = true
			return f
		}
		if t.Failed(addr, err) && (p.HintLimit <= 0 || hints < p.HintLimit) {
			hints++
			if p.OnRetry != nil {
				p.OnRetry(addr, err, true, 0)
			}
			continue
		}
		hints = 0
		if p.OnRetry != nil {
			p.OnRetry(addr, err, false, pause)
		}
		if err := clock.Sleep(ctx, clk, pause); err != nil {
			return f
		}
		pause = min(2*pause, p.MaxBackoff)
	}
}

// LeaderHint is the leader's admin address named by an adminpb.LeaderHint
// detail of err, "" if none.
func LeaderHint(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if h, ok := d.(*adminpb.LeaderHint); ok && h.GetLeaderAdminAddress() != "" {
			return h.GetLeaderAdminAddress()
		}
	}
	return ""
}
