package scheduler

import (
	"fmt"
	"strings"
)

// WaitInfo: why a procedure is not running.
type WaitInfo struct {
	ID      uint64
	Queued  bool
	Lock    *Lock    // lock waited for, nil if none
	Holders []uint64 // who holds Lock
	Event   string   // description of the event waited for, "" if none
	Held    []Lock   // locks id holds

	// Exclusive reports whether Holders[0] holds Lock exclusively; the
	// other Holders (all of them if false) hold it shared, ascending.
	Exclusive bool
	// Ahead lists the ids queued for Lock before this one, arrival order.
	Ahead []uint64
}

// Why explains what id is doing as far as the scheduler knows: queued to
// run, parked on a lock (which, in which mode, held by whom, behind whom),
// parked on an event, and which locks it holds. A procedure that is none of
// these is running, finished or unknown to the scheduler.
func (s *Scheduler) Why(id uint64) WaitInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	wi := WaitInfo{ID: id}
	_, wi.Queued = s.queued[id]
	if e, ok := s.lockWait[id]; ok {
		for _, w := range e.waiters {
			if w.id == id {
				wi.Lock = &Lock{Type: e.key.typ, Name: e.key.name, Mode: w.mode}
				break
			}
			wi.Ahead = append(wi.Ahead, w.id)
		}
		if e.hasExcl {
			wi.Exclusive = true
			wi.Holders = append(wi.Holders, e.excl)
		}
		wi.Holders = append(wi.Holders, sortedIDs(e.shared)...)
	}
	if ev, ok := s.eventWait[id]; ok {
		wi.Event = ev.description
	}
	wi.Held = s.heldLocked(id)
	return wi
}

// String renders wi on one line for an operator, e.g.
//
//	proc 7: waiting for lock table ns:t (exclusive), held exclusive by 3; holds namespace ns (shared)
func (wi WaitInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "proc %d:", wi.ID)
	var parts []string
	if wi.Queued {
		parts = append(parts, "queued to run")
	}
	if wi.Lock != nil {
		p := "waiting for lock " + wi.Lock.String()
		switch {
		case len(wi.Holders) == 0:
			p += ", not held"
		case wi.Exclusive:
			p += fmt.Sprintf(", held exclusive by %d", wi.Holders[0])
			if len(wi.Holders) > 1 {
				p += fmt.Sprintf(", shared by %s", joinIDs(wi.Holders[1:]))
			}
		default:
			p += ", held shared by " + joinIDs(wi.Holders)
		}
		if len(wi.Ahead) > 0 {
			p += ", behind waiters " + joinIDs(wi.Ahead)
		}
		parts = append(parts, p)
	}
	if wi.Event != "" {
		parts = append(parts, "waiting for event "+wi.Event)
	}
	if len(parts) == 0 {
		parts = append(parts, "not queued or waiting (running, done or unknown)")
	}
	b.WriteString(" " + strings.Join(parts, "; "))
	if len(wi.Held) > 0 {
		hs := make([]string, len(wi.Held))
		for i, l := range wi.Held {
			hs[i] = l.String()
		}
		b.WriteString("; holds " + strings.Join(hs, ", "))
	}
	return b.String()
}

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}
