package domain

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// regionBudget bounds the region procedures the table procedures (create,
// enable, disable, delete) have in flight across the cluster, one term's
// leader at a time (Config.RegionBudget). Without it each table procedure
// spawned its own waves of Config.RegionWave, so memory grew with tables ×
// wave: ten creates sent together put 50,000 region procedures in flight,
// a thousand small ones 100,000.
//
// A table procedure asks for its next wave (at most RegionWave) before it
// spawns it; the budget grants the whole wave or nothing. Grants go in
// the order the tables first asked: a table whose wave is done and asks
// for its next one goes before every table that asked after it first, so
// tables finish one after another, first come first served, and none
// starves, a big wave waiting at the head until enough has come back.
// Taking turns instead (round robin) kept every table in progress until
// the end: at 1,000,000 regions sent as 100 creates, none was usable
// before the last wave, and each held its table lock and its procedure's
// state the whole time. A region procedure
// gives its place back when it ends (the executor's listener, onEnded);
// a table procedure's next step finds its wave all ended and settles
// what the listener may have missed (settle).
//
// Nothing of it is persisted: the saved progress (Spawned) says what was
// spawned, and a new leader's budget starts empty. The children the
// previous leader had in flight finish outside it, at most one budget's
// worth, since that leader kept to it.
type regionBudget struct {
	limit int

	mu       sync.Mutex
	inFlight int                      // granted, not yet given back
	holds    map[uint64]*budgetHold   // by table procedure id
	queue    []uint64                 // table procedures waiting, by ticket
	waiting  map[uint64]*budgetWaiter // the queue's members
	// tickets number the table procedures in the order they first asked;
	// a table keeps its ticket until it ends.
	tickets    map[uint64]uint64
	nextTicket uint64
}

// budgetHold is what one table procedure holds of the budget.
type budgetHold struct {
	inFlight int // its region procedures spawned and not ended
	granted  int // granted while it waited, not yet taken by its step
	// ended are the region procedures of its wave whose end gave a place
	// back. An end is heard again when the table procedure rolls back:
	// each step of a succeeded child undone writes it again (SUCCESS,
	// then ROLLEDBACK), and giving back a place each time gave back its
	// siblings' still in flight, which the budget granted again. At most
	// a wave, and only while some of it is in flight.
	ended map[uint64]struct{}
}

type budgetWaiter struct {
	want int
	ev   *scheduler.Event
}

func newRegionBudget(limit int) *regionBudget {
	return &regionBudget{limit: limit, holds: map[uint64]*budgetHold{}, waiting: map[uint64]*budgetWaiter{}, tickets: map[uint64]uint64{}}
}

// take asks for want (1..) places for table procedure id's next wave. It
// answers the places granted (want, or fewer if want exceeds the limit),
// or 0, an event the grant will wake and a note for the procedure's Why.
// A procedure woken by that event calls take again and gets its grant.
func (b *regionBudget) take(id uint64, want int) (int, *scheduler.Event, string) {
	want = max(min(want, b.limit), 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.tickets[id]; !ok {
		b.nextTicket++
		b.tickets[id] = b.nextTicket
	}
	h := b.holds[id]
	if h == nil || h.granted == 0 {
		if w := b.waiting[id]; w != nil {
			// Woken for another reason (an abort, a restart of the step):
			// still in the queue, with a fresh event in case the old one
			// was spent.
			w.ev = scheduler.NewEvent("region budget")
			return 0, w.ev, b.noteLocked(id)
		}
		if b.limit-b.inFlight < want || (len(b.queue) > 0 && b.tickets[id] >= b.tickets[b.queue[0]]) {
			w := &budgetWaiter{want: want, ev: scheduler.NewEvent("region budget")}
			b.waiting[id] = w
			at, _ := slices.BinarySearchFunc(b.queue, b.tickets[id], func(q, t uint64) int { return cmp.Compare(b.tickets[q], t) })
			b.queue = slices.Insert(b.queue, at, id)
			return 0, w.ev, b.noteLocked(id)
		}
		b.grantLocked(id, want)
		h = b.holds[id]
	}
	// The grant, made now or while it waited, is taken.
	g := h.granted
	h.granted = 0
	h.inFlight += g
	h.ended = nil
	return g, nil, ""
}

func (b *regionBudget) noteLocked(id uint64) string {
	ahead := 0
	for _, q := range b.queue {
		if q == id {
			break
		}
		ahead++
	}
	return fmt.Sprintf("waiting for the region budget: %d of %d region procedures in flight, %s ahead (Config.RegionBudget)",
		b.inFlight, b.limit, countOf(ahead, "table procedure"))
}

func (b *regionBudget) grantLocked(id uint64, n int) {
	h := b.holds[id]
	if h == nil {
		h = &budgetHold{}
		b.holds[id] = h
	}
	h.granted += n
	b.inFlight += n
}

// giveBack returns n of table procedure id's places unused (a wave that
// needed fewer children than granted) and answers the events of the
// waiters it lets in, for the caller to wake.
func (b *regionBudget) giveBack(id uint64, n int) []*scheduler.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.holds[id]; h != nil {
		n = min(n, h.inFlight)
		h.inFlight -= n
		b.inFlight -= n
	}
	return b.pumpLocked()
}

// settle is called by table procedure id's step before it asks for its
// next wave: every region procedure it spawned has ended by then, so
// whatever the listener did not give back (a child whose end it never
// heard of) is given back now. A grant made while it waited stays.
func (b *regionBudget) settle(id uint64) []*scheduler.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holds[id]
	if h == nil || h.inFlight == 0 {
		return nil
	}
	b.inFlight -= h.inFlight
	h.inFlight = 0
	h.ended = nil
	return b.pumpLocked()
}

// onEnded is told of every procedure that ended (the executor's
// listener): a region procedure gives its parent's place back; a table
// procedure leaves the queue and gives back all it held.
func (b *regionBudget) onEnded(id, parent uint64) []*scheduler.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.holds[parent]; h != nil && h.inFlight > 0 {
		if _, again := h.ended[id]; again {
			return nil
		}
		if h.ended == nil {
			h.ended = map[uint64]struct{}{}
		}
		h.ended[id] = struct{}{}
		h.inFlight--
		b.inFlight--
		if h.inFlight == 0 {
			h.ended = nil // an end heard now finds nothing to give back
		}
		return b.pumpLocked()
	}
	h, waits := b.holds[id], b.waiting[id] != nil
	if h == nil && !waits {
		return nil
	}
	if h != nil {
		b.inFlight -= h.inFlight + h.granted
		delete(b.holds, id)
	}
	delete(b.tickets, id)
	if waits {
		delete(b.waiting, id)
		for i, q := range b.queue {
			if q == id {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	return b.pumpLocked()
}

// pumpLocked grants the queue's head its wave while the budget has room
// for it, and answers the events to wake. The head is never passed over
// for a smaller wave behind it: that is what keeps a big wave from
// starving.
func (b *regionBudget) pumpLocked() []*scheduler.Event {
	var wake []*scheduler.Event
	for len(b.queue) > 0 {
		id := b.queue[0]
		w := b.waiting[id]
		if b.limit-b.inFlight < w.want {
			break
		}
		b.queue = b.queue[1:]
		delete(b.waiting, id)
		b.grantLocked(id, w.want)
		wake = append(wake, w.ev)
	}
	if len(b.queue) == 0 {
		b.queue = nil // let go of the backing array
	}
	return wake
}

// stats answers the places in flight and the table procedures waiting.
func (b *regionBudget) stats() (inFlight, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight, len(b.queue)
}

// takeWave is a table procedure's ask for its next wave of at most want
// region procedures. ok false: the step must return flow and err (a
// suspension until the budget, or the leader's services, let it go on).
func takeWave(ctx *procedure.Context, want int) (grant int, svc *services, ok bool, flow procedure.Flow, err error) {
	_, svc, flow, err = servicesOf(ctx)
	if svc == nil {
		return 0, nil, false, flow, err
	}
	svc.wakeAll(svc.budget.settle(ctx.ID()))
	g, ev, note := svc.budget.take(ctx.ID(), want)
	if g == 0 {
		ctx.Suspend(procedure.OnEvent(ev), procedure.Because(note), procedure.SkipPersistence())
		return 0, svc, false, procedure.HasMoreState, nil
	}
	return g, svc, true, procedure.NoMoreState, nil
}

// wakeAll wakes the table procedures the budget let in.
func (s *services) wakeAll(evs []*scheduler.Event) {
	for _, ev := range evs {
		s.x.Wake(ev)
	}
}
