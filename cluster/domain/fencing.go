package domain

import (
	"time"
)

// serverAlive reports whether incarnation ref is the live one in the
// replicated state (its address too). One that is not is fenced: nothing
// new is sent to it, its start code is refused, and it drops every region
// when told it expired. That is not yet proof that it stopped serving
// (the answer may be lost): see presenceOf.
func serverAlive(r reader, ref ServerRef) (Server, bool, error) {
	srv, ok, err := getServer(r, ref.ID)
	if err != nil || !ok {
		return Server{}, false, err
	}
	return srv, srv.StartCode == ref.StartCode && srv.State == ServerLive, nil
}

// presence is what a region procedure may assume of a server incarnation
// a region is recorded on.
type presence int

const (
	// present: the live incarnation; operations go to it.
	present presence = iota
	// fencing: no longer the live incarnation, but it may still serve its
	// regions until its self-fence deadline; nothing of it may be counted
	// closed yet.
	fencing
	// gone: proven to serve nothing; its regions count as closed.
	gone
)

// presenceOf tells whether incarnation ref is live, gone, or fencing; for
// fencing, also how long until it is certainly gone.
//
// Not being the live incarnation in the replicated state is not enough to
// reopen its regions elsewhere: the "expired" answer that tells a server
// to drop its regions may have been lost, and a server cut off from the
// masters keeps serving until it fences itself. An incarnation is gone
// once the process that held it registered again saying it dropped it
// (a server drops every region before it registers), or once its
// self-fence deadline has certainly passed:
// selfFence (3 × the heartbeat interval the server was told) plus
// FenceMargin after the last renewal it may have been granted. That is the
// latest renewal this term granted it, or, when there is none, the moment
// this term's services started: a renewal takes effect only after the
// granting leader verified its leadership with a quorum (see Heartbeat),
// which no predecessor can do once this leader was elected.
func (s *services) presenceOf(r reader, ref ServerRef) (Server, presence, time.Duration, error) {
	srv, ok, err := s.servers.get(r, ref.ID)
	if err != nil {
		return Server{}, fencing, 0, err
	}
	if ok && srv.StartCode == ref.StartCode && srv.State == ServerLive {
		return srv, present, 0, nil
	}
	if ok && srv.StartCode > ref.StartCode && srv.Dropped >= ref.StartCode {
		// The live registration says it gave ref (or a later incarnation
		// of the same process, which gave ref up before registering) up:
		// a process closes everything before it registers again. A
		// registration that does not say so (a fresh process, a late copy
		// of an earlier request) proves nothing about ref.
		return srv, gone, 0, nil
	}
	left := s.renewedAt(ref).Add(s.selfFence() + s.d.cfg.FenceMargin).Sub(s.d.cfg.Clock.Now())
	if left > 0 {
		return srv, fencing, left, nil
	}
	return srv, gone, 0, nil
}

// selfFence is how long a region server keeps its regions after the
// renewal it last sent: the region server caps its self-fence period at
// three of the heartbeat intervals it was told (package rs). Every master
// must be configured with the same HeartbeatInterval: the interval told
// is not replicated, so a leader with a shorter one would count a server
// gone too soon.
func (s *services) selfFence() time.Duration { return 3 * s.toldInterval() }

// toldInterval is the heartbeat interval told to registering servers: the
// wire carries whole milliseconds, so it is rounded up to one, never down
// (a server told 0 would fall back to its own default, longer than the
// masters assume).
func (s *services) toldInterval() time.Duration {
	return max((s.d.cfg.HeartbeatInterval + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}

// renewedAt is the latest moment from which incarnation ref may be
// counting its self-fence period.
func (s *services) renewedAt(ref ServerRef) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.renewed[ref]; ok && t.After(s.startedAt) {
		return t
	}
	return s.startedAt
}

// heartbeatAt is ref's latest renewal this term (a heartbeat or its
// registration), for display: ok is false while ref has not been heard
// from by this leader, whose lease then rests on the grace period alone.
func (s *services) heartbeatAt(ref ServerRef) (t time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok = s.renewed[ref]
	return t, ok && !t.Before(s.startedAt)
}

// noteRenewal records that ref may be granted a renewal now. Heartbeat
// calls it before its last liveness check, so a crash procedure that reads
// renewedAt after committing the expiry sees every renewal that check let
// through.
func (s *services) noteRenewal(ref ServerRef) {
	now := s.d.cfg.Clock.Now()
	s.mu.Lock()
	s.renewed[ref] = now
	s.mu.Unlock()
}
