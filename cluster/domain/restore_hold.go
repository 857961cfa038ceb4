package domain

import (
	"context"
	"encoding/json"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/raftfsm"
)

// A restored cluster's state is older than the region servers' reality:
// a region moved after the save, or opened on a server registered after
// it, is recorded elsewhere (or nowhere). A server the restored state
// knows proves it gave its regions up by registering again (it does so at
// the first answer naming the new cluster), but a server it does not know
// proves nothing to it, and the region it hosts may be the very one the
// restored leader reopens on a server that did register. So while the
// state carries cluster.RestoredKey, a leader holds its dispatch (nothing
// is opened or closed) for the lease's hard limit from its start: by
// then every region server either heard of the new cluster (and closed
// everything) or went that long without a heartbeat answered, the old
// masters being gone, and fenced itself. Then it deletes the mark, so
// later leaders do not hold again; a leader deposed before that holds
// anew, as it must (the next knows nothing of this one's clock).

// pauseRestoreHold is the hold's reason to pause dispatch, apart from
// maintenance mode's: each resumes only its own.
const pauseRestoreHold = "restore hold"

// startRestoreHold pauses dispatch for the hold if the state carries the
// mark; the procedures meanwhile run and queue their operations.
func (s *services) startRestoreHold() {
	v, ok := s.n.FSM().Get(cluster.RestoredKey)
	if !ok {
		return
	}
	var mark cluster.RestoredMark
	_ = json.Unmarshal(v, &mark) // the hold does not depend on what it says
	// The hard limit, or a server's self-fence period and its margin if
	// that is longer (a heartbeat interval set apart from the lease): the
	// hold must outlast how long a server keeps regions unanswered.
	hold := max(s.d.cfg.ServerLease.HardLimit, s.selfFence()+s.d.cfg.FenceMargin)
	s.disp.Pause(pauseRestoreHold)
	s.log.Warn("restored from a snapshot: dispatch held for a region server's self-fence period, so that no server the snapshot does not know still hosts a region reopened elsewhere",
		"hold", hold, "restored_from", mark.From, "snapshot_index", mark.Index)
	fired := make(chan struct{})
	t := s.d.cfg.Clock.AfterFunc(hold, func() { close(fired) })
	s.background(func() {
		defer t.Stop()
		select {
		case <-fired:
		case <-s.stopCh:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.ApplyTimeout)
		defer cancel()
		if err := s.commit(ctx, raftfsm.Del(cluster.RestoredKey)); err != nil {
			// The hold is over in this term all the same; a later leader
			// finds the mark and holds again, which is only slower.
			s.log.Warn("restore hold over, but its mark not deleted; the next leader holds again", "error", err)
		}
		// Maintenance mode, if on, still holds dispatch: its own reason.
		s.disp.Resume(pauseRestoreHold)
		s.log.Info("restore hold over: dispatch follows maintenance mode again")
	})
}
