package console

import (
	"context"
	"net/http"
	"sort"

	"github.com/baton-dev/baton/proto/adminpb"
)

type locksPage struct {
	base
	Locks  []*adminpb.LockEntry
	Chains []chain
	Error  string
	// More: the lock table has more locks than a page of ListLocks, the
	// most a page shows.
	More bool
}

// chain is who blocks whom, from a procedure nobody waits behind down to
// the procedure at the end of the line: one that holds what others wait
// for and waits for no lock itself (it runs, sleeps, or waits for
// something else, which its WaitingFor says).
type chain struct {
	Links []link
	// Blocker is the procedure at the end; Cycle is set instead when the
	// line comes back on itself (locks taken in order never do).
	Blocker *adminpb.LockParty
	Cycle   bool
}

// link is one waiting procedure and the lock it waits for, with the
// lock's holders.
type link struct {
	Waiter  *adminpb.LockParty
	Lock    *adminpb.LockEntry
	Holders []*adminpb.LockParty
}

// chains follows every queue in locks: a waiter waits for its lock's
// holders; a holder that waits itself continues the line. One chain per
// waiter that no one waits behind.
func chains(locks []*adminpb.LockEntry) []chain {
	// A procedure waits in one queue at a time (the scheduler parks it on
	// the first lock it could not take).
	waitsOn := map[uint64]*adminpb.LockEntry{}
	party := map[uint64]*adminpb.LockParty{}
	blocking := map[uint64]bool{} // holds a lock someone waits for
	for _, e := range locks {
		for _, w := range e.GetWaiters() {
			waitsOn[w.GetProcId()] = e
			party[w.GetProcId()] = w
		}
		if len(e.GetWaiters()) > 0 {
			for _, h := range e.GetHolders() {
				blocking[h.GetProcId()] = true
			}
		}
	}
	var heads []uint64
	for id := range waitsOn {
		if !blocking[id] {
			heads = append(heads, id)
		}
	}
	if len(heads) == 0 && len(waitsOn) > 0 {
		// Only cycles: start at the lowest id, once.
		first := uint64(0)
		for id := range waitsOn {
			if first == 0 || id < first {
				first = id
			}
		}
		heads = append(heads, first)
	}
	sort.Slice(heads, func(i, j int) bool { return heads[i] < heads[j] })
	var out []chain
	for _, head := range heads {
		var ch chain
		seen := map[uint64]bool{}
		cur := party[head]
		for {
			seen[cur.GetProcId()] = true
			e := waitsOn[cur.GetProcId()]
			l := link{Waiter: cur, Lock: e, Holders: e.GetHolders()}
			ch.Links = append(ch.Links, l)
			// Follow the first holder that waits in turn; else the first
			// holder ends the line.
			var next *adminpb.LockParty
			for _, h := range l.Holders {
				if _, waits := waitsOn[h.GetProcId()]; waits {
					next = h
					break
				}
			}
			if next == nil {
				if len(l.Holders) > 0 {
					ch.Blocker = l.Holders[0]
				} else if ahead := e.GetWaiters(); len(ahead) > 0 && ahead[0].GetProcId() != cur.GetProcId() {
					// Not held: the waiter is behind the first in the queue.
					ch.Blocker = ahead[0]
				}
				break
			}
			if seen[next.GetProcId()] {
				ch.Cycle = true
				break
			}
			cur = party[next.GetProcId()]
		}
		out = append(out, ch)
	}
	return out
}

func (c *Console) locks(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Locks")
	if rd == nil {
		return
	}
	var p locksPage
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListLocksResponse, error) {
		return c.self.ListLocks(ctx, &adminpb.ListLocksRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = leaderOnly(rd, err)
	} else {
		p.Locks, p.More = resp.GetLocks(), resp.GetNextPageToken() != ""
		p.Chains = chains(p.Locks)
	}
	p.base = c.base(rd, "Locks", "locks", true)
	c.render(w, http.StatusOK, "locks", p)
}
