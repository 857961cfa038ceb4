package client

import (
	"slices"
	"sync"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/adminpb"
)

// LeaderTracker decides where a leader-following caller sends its next
// attempt: to the believed leader; after a failure to the leader named by a
// LeaderHint in the error, else to the address after the failed one. The
// Client uses it for admin calls, region servers for their calls to the
// masters. It is safe for concurrent use.
type LeaderTracker struct {
	mu     sync.Mutex
	addrs  []string // the given addresses, then hinted ones
	leader string   // believed leader's address; "" if unknown
	next   int      // index in addrs of the next address to try without a leader
}

// NewLeaderTracker starts with no leader known; addrs must not be empty.
func NewLeaderTracker(addrs []string) *LeaderTracker {
	return &LeaderTracker{addrs: slices.Clone(addrs)}
}

// Target is the address of the next attempt.
func (t *LeaderTracker) Target() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leader != "" {
		return t.leader
	}
	return t.addrs[t.next%len(t.addrs)]
}

// Leader is the believed leader's address, "" if unknown.
func (t *LeaderTracker) Leader() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leader
}

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
