package domain

// DispatchIsPaused reports whether this term's dispatch is paused
// for maintenance mode (what firstOpens.add looks at).
func (s *services) DispatchIsPaused() bool { return s.dispatchPaused() != nil }

// OpWaits counts the single op waits this term's services
// keep, by proc id.
func (s *services) OpWaits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waits)
}
