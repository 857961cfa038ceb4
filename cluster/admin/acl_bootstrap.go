package admin

import (
	"context"
	"errors"

	"github.com/baton-dev/baton/cluster/access"
)

// bootstrapACL runs on the leader's registration tick: the first leader of
// a cluster enforcing access control makes the bootstrap token, and every
// leader binds the clients of Access.InitialGrants that are unbound.
func (s *Server) bootstrapACL(ctx context.Context) {
	if !s.acc.Enforce || !s.b.IsLeader() {
		return
	}
	if _, err := s.b.Procedures(); err != nil {
		return // not established: the state may not be caught up yet
	}
	now := s.acc.Clock.Now().UnixMilli()
	muts, granted := s.acl.InitialGrantWrites(s.b.ID(), now)
	muts = append(muts, s.acl.TokenUseWrites()...)
	// Said once; the check reads and decodes the boot record, so it is
	// not made again once said.
	if !s.bootIgnoredSaid.Load() {
		if given, recorded, ignored := s.acl.GivenBootstrapIgnored(); ignored && !s.bootIgnoredSaid.Swap(true) {
			s.log.Warn("--acl-bootstrap-token-file holds another token than the cluster's bootstrap token, which stays: the file counts only at the cluster's first bootstrap",
				"given_accessor", given, "cluster_accessor", recorded)
		}
	}
	boot, bootMuts, err := s.acl.BootstrapWrites(s.b.ID(), now, s.acc.BootstrapTokenTTL)
	switch {
	case errors.Is(err, access.ErrBootstrapWaits):
		if !s.bootWaitSaid.Swap(true) {
			s.log.Info("the bootstrap token waits for cluster version 2: a master of 0.1.0 would accept it after its TTL",
				"cluster_version", clusterFormatOf(s.b), "ttl", s.acc.BootstrapTokenTTL)
		}
	case err != nil:
		s.log.Error("bootstrap token", "error", err)
		return
	}
	muts = append(muts, bootMuts...)
	if len(muts) > 0 {
		if err := s.b.Mutate(ctx, muts); err != nil {
			// It may commit all the same: the next tick finds out.
			s.log.Warn("access control bootstrap not committed; will look again", "error", err)
			return
		}
	}
	if len(granted) > 0 {
		s.log.Info("initial grants bound", "clients", granted)
	}
	if boot == nil {
		return
	}
	if !s.acl.MarkBootTold() {
		switch {
		case boot.Given:
			// The operator has it: its secret goes nowhere, the
			// accessor says which token it is.
			s.log.Info("bootstrap token stored as given (--acl-bootstrap-token-file)", "accessor", boot.Accessor)
		case s.acc.OnBootstrap != nil:
			s.log.Info("bootstrap token made", "accessor", boot.Accessor)
			s.acc.OnBootstrap(boot.Secret)
		default:
			s.log.Info("bootstrap token made", "accessor", boot.Accessor)
			s.log.Warn("bootstrap token (admin; shown once)", "token", boot.Secret)
		}
	}
	// Told: say so in the replicated state, so that no later leader
	// replaces it. If this write fails, the next tick makes it again.
	if err := s.b.Mutate(ctx, access.BootToldWrites(s.b.ID(), boot.Accessor, now)); err != nil {
		s.log.Warn("bootstrap token told, but not yet recorded as told; will retry", "error", err)
		return
	}
	s.acl.BootRecorded()
}
