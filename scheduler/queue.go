package scheduler

import (
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/locked"
)

// Run queues.
//
// Layout: one kindQueue per Kind; in it, the non-empty priority levels
// sorted highest first; in each level, a circular doubly linked list of the
// non-empty entity queues of that priority (the rotation), with head the
// entity served next; in each entity queue, a ring buffer of ids. An entity
// queue that empties is unlinked, dropped from the name index and recycled,
// so thousands of tables cost nothing once idle. Every operation is O(1)
// except Remove, which scans one entity queue.

const (
	maxFreeQueues  = 1024 // recycled entity queues kept
	maxKeptRingCap = 256  // larger ring buffers are not kept when recycling
	maxFreeLevels  = 16
)

type kindQueue struct {
	byName map[string]*entityQueue
	levels []*level // non-empty levels, highest priority first
	n      int      // ids queued in this kind
}

type level struct {
	prio int
	head *entityQueue // next entity to serve
	n    int          // entities in the rotation
}

type entityQueue struct {
	kind       Kind
	name       string
	lvl        *level
	prev, next *entityQueue
	ids        ring
}

// ring is a FIFO/LIFO deque of ids in a power-of-two buffer.
type ring struct {
	buf  []uint64
	head int
	n    int
}

func (r *ring) grow() {
	c := 2 * len(r.buf)
	if c == 0 {
		c = 4
	}
	nb := make([]uint64, c)
	for i := 0; i < r.n; i++ {
		nb[i] = r.at(i)
	}
	r.buf, r.head = nb, 0
}

func (r *ring) at(i int) uint64 { return r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) pushBack(id uint64) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = id
	r.n++
}

func (r *ring) pushFront(id uint64) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = id
	r.n++
}

func (r *ring) popFront() uint64 {
	id := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return id
}

// remove deletes id, keeping the order of the others.
func (r *ring) remove(id uint64) bool {
	mask := len(r.buf) - 1
	for i := 0; i < r.n; i++ {
		if r.at(i) != id {
			continue
		}
		for j := i; j < r.n-1; j++ {
			r.buf[(r.head+j)&mask] = r.buf[(r.head+j+1)&mask]
		}
		r.n--
		return true
	}
	return false
}

// AddBack queues id at the back of its entity queue. Adding an id that is
// already queued is a no-op and returns false.
//
// A new entity queue joins the end of its priority level's rotation.
// AddBack after Close is accepted, but Poll no longer hands anything out.
func (s *Scheduler) AddBack(id uint64, key QueueKey) bool {
	return s.add(id, key, false)
}

// AddFront queues id at the front of its entity queue, and moves that queue
// to the head of its priority level's rotation, so id is the next procedure
// of its priority level to be polled. This is what woken procedures and new
// children get: they already waited, or their parent waits for them. Adding
// an id that is already queued is a no-op and returns false.
func (s *Scheduler) AddFront(id uint64, key QueueKey) bool {
	return s.add(id, key, true)
}

func (s *Scheduler) add(id uint64, key QueueKey, front bool) bool {
	checkKind(key.Kind)
	s.mu.Lock()
	ok := s.addLocked(id, key, front)
	s.mu.Unlock()
	return ok
}

// checkKind panics on a Kind outside KindMeta..KindTable: a programming
// error, reported before the mutex is taken so the Scheduler stays usable.
func checkKind(k Kind) {
	if int(k) >= numKinds {
		panic(fmt.Sprintf("scheduler: invalid queue kind %d", k))
	}
}

func (s *Scheduler) addLocked(id uint64, key QueueKey, front bool) bool {
	if _, dup := s.queued[id]; dup {
		return false
	}
	kq := &s.kinds[key.Kind]
	prio := effectivePriority(key.Priority)
	q := kq.byName[key.Name]
	switch {
	case q == nil:
		q = s.newQueue()
		q.kind, q.name = key.Kind, key.Name
		kq.byName[key.Name] = q
		s.link(kq, q, s.levelFor(kq, prio), front)
	case q.lvl.prio != prio:
		// The entity's priority changed (a server that now carries meta,
		// say): move the whole queue to the new level.
		s.unlink(kq, q)
		s.link(kq, q, s.levelFor(kq, prio), front)
	case front && q.lvl.head != q:
		lvl := q.lvl
		q.prev.next, q.next.prev = q.next, q.prev
		h := lvl.head
		q.prev, q.next = h.prev, h
		h.prev.next, h.prev = q, q
		lvl.head = q
	}
	if front {
		q.ids.pushFront(id)
	} else {
		q.ids.pushBack(id)
	}
	s.queued[id] = q
	kq.n++
	s.signalOne()
	return true
}

// levelFor returns kq's level of priority prio, creating it if needed.
func (s *Scheduler) levelFor(kq *kindQueue, prio int) *level {
	i, found := slices.BinarySearchFunc(kq.levels, prio, func(l *level, p int) int {
		return p - l.prio // descending
	})
	if found {
		return kq.levels[i]
	}
	var l *level
	if n := len(s.freeLevels); n > 0 {
		l = s.freeLevels[n-1]
		s.freeLevels = s.freeLevels[:n-1]
	} else {
		l = new(level)
	}
	l.prio = prio
	kq.levels = slices.Insert(kq.levels, i, l)
	return l
}

// link puts q into lvl's rotation: at its head if front, else at its end.
func (s *Scheduler) link(kq *kindQueue, q *entityQueue, lvl *level, front bool) {
	q.lvl = lvl
	if h := lvl.head; h == nil {
		q.prev, q.next = q, q
		lvl.head = q
	} else {
		q.prev, q.next = h.prev, h
		h.prev.next, h.prev = q, q
		if front {
			lvl.head = q
		}
	}
	lvl.n++
}

// unlink takes q out of its level's rotation, dropping the level if empty.
func (s *Scheduler) unlink(kq *kindQueue, q *entityQueue) {
	lvl := q.lvl
	if q.next == q {
		lvl.head = nil
	} else {
		q.prev.next, q.next.prev = q.next, q.prev
		if lvl.head == q {
			lvl.head = q.next
		}
	}
	q.prev, q.next, q.lvl = nil, nil, nil
	lvl.n--
	if lvl.n == 0 {
		i := slices.Index(kq.levels, lvl)
		kq.levels = slices.Delete(kq.levels, i, i+1)
		if len(s.freeLevels) < maxFreeLevels {
			s.freeLevels = append(s.freeLevels, lvl)
		}
	}
}

func (s *Scheduler) newQueue() *entityQueue {
	if n := len(s.freeQueues); n > 0 {
		q := s.freeQueues[n-1]
		s.freeQueues = s.freeQueues[:n-1]
		return q
	}
	return new(entityQueue)
}

// dropQueue forgets the empty queue q and recycles it.
func (s *Scheduler) dropQueue(kq *kindQueue, q *entityQueue) {
	s.unlink(kq, q)
	delete(kq.byName, q.name)
	q.name = ""
	q.ids.head, q.ids.n = 0, 0
	if len(q.ids.buf) > maxKeptRingCap {
		q.ids.buf = nil
	}
	if len(s.freeQueues) < maxFreeQueues {
		s.freeQueues = append(s.freeQueues, q)
	}
}

// pollLocked takes the next id: first kind with work, its highest level,
// the entity at the head of that level's rotation; the rotation then moves
// on to the next entity.
func (s *Scheduler) pollLocked() (uint64, bool) {
	for k := range s.kinds {
		kq := &s.kinds[k]
		if kq.n == 0 {
			continue
		}
		lvl := kq.levels[0]
		q := lvl.head
		id := q.ids.popFront()
		kq.n--
		delete(s.queued, id)
		if q.ids.n == 0 {
			s.dropQueue(kq, q)
		} else {
			lvl.head = q.next
		}
		return id, true
	}
	return 0, false
}

// pollWaiter is a Poll blocked for want of work. ch has room for one token,
// sent (under s.mu) by whoever takes the waiter off s.idle.
type pollWaiter struct{ ch chan struct{} }

// signalOne wakes one blocked Poll, if any.
func (s *Scheduler) signalOne() {
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		w.ch <- struct{}{}
	}
}

// Poll removes and returns the next runnable id. It waits up to timeout
// (forever if timeout < 0); ok is false on timeout or after Close. Once the
// scheduler is closed Poll returns ok=false at once, even if ids are queued.
//
// Order: kinds meta, server, peer, table; within a kind the highest
// priority; within a priority, entities in turn (one id each), each entity's
// ids in queue order.
func (s *Scheduler) Poll(timeout time.Duration) (id uint64, ok bool) {
	var (
		timeUp   chan struct{} // closed at the deadline
		deadline time.Time
	)
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return 0, false
		}
		if id, ok = s.pollLocked(); ok {
			s.mu.Unlock()
			return id, true
		}
		if timeout == 0 {
			s.mu.Unlock()
			return 0, false
		}
		w := s.getWaiter()
		s.idle = append(s.idle, w)
		s.mu.Unlock()

		timedOut := false
		if timeout < 0 {
			<-w.ch
		} else {
			if timeUp == nil {
				deadline = s.clock.Now().Add(timeout)
				ch := make(chan struct{})
				timer := s.clock.AfterFunc(timeout, func() { close(ch) })
				defer timer.Stop()
				timeUp = ch
			}
			select {
			case <-w.ch:
			case <-timeUp:
				timedOut = true
			}
		}

		s.mu.Lock()
		if timedOut {
			if i := slices.Index(s.idle, w); i >= 0 {
				s.idle = slices.Delete(s.idle, i, i+1)
			} else {
				<-w.ch // signalled as the timer fired: the token is there
			}
			s.putWaiter(w)
			if !s.closed {
				if id, ok = s.pollLocked(); ok {
					s.mu.Unlock()
					return id, true
				}
			}
			s.mu.Unlock()
			return 0, false
		}
		s.putWaiter(w)
		if timeUp != nil && !s.clock.Now().Before(deadline) {
			// Woken, but the time is up: one last try.
			if !s.closed {
				id, ok = s.pollLocked()
			}
			s.mu.Unlock()
			return id, ok
		}
	}
}

func (s *Scheduler) getWaiter() *pollWaiter {
	if n := len(s.freeWaiters); n > 0 {
		w := s.freeWaiters[n-1]
		s.freeWaiters = s.freeWaiters[:n-1]
		return w
	}
	return &pollWaiter{ch: make(chan struct{}, 1)}
}

func (s *Scheduler) putWaiter(w *pollWaiter) {
	if len(s.freeWaiters) < 64 {
		s.freeWaiters = append(s.freeWaiters, w)
	}
}

// Remove takes id out of the run queue if queued; reports whether it was.
func (s *Scheduler) Remove(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queued[id]
	if !ok {
		return false
	}
	delete(s.queued, id)
	q.ids.remove(id)
	kq := &s.kinds[q.kind]
	kq.n--
	if q.ids.n == 0 {
		s.dropQueue(kq, q)
	}
	return true
}

// Len is the number of queued ids.
func (s *Scheduler) Len() int {
	return locked.Call(&s.mu, func() int { return len(s.queued) })
}

// Queued reports whether id is in the run queue.
func (s *Scheduler) Queued(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.queued[id]
	return ok
}

// Close wakes every Poll, which then returns ok=false. Locks keep working
// after Close and only Poll stops handing out work, but the procedures
// parked on events are taken off them and none park any more: an Event can
// outlive s and be used with the next Scheduler (a new executor in the same
// process), which must not find s's waiters on it. Close is idempotent.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.dropEventWaitersLocked()
	for len(s.idle) > 0 {
		s.signalOne()
	}
	s.mu.Unlock()
}
