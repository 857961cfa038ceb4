package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// clusterIDOf is the cluster id get's state holds, "" when none.
func clusterIDOf(get func(string) ([]byte, bool)) string {
	v, _ := get(cluster.ClusterIDKey)
	return string(v)
}

// ensureClusterID writes the cluster's id, on the leader, if the state has
// none and the cluster version allows format 2. It is one of the keys
// 0.2.0 adds, written as they are only once every member runs 0.2.0;
// 0.1.0 would not misread it (it reads no key under cluster/, checked at
// fa4612c), so the gate is caution: nothing a 0.1.0 member never saw
// written is there before the raise. The write is fenced to the term of a
// barrier after which the key was still absent, so of two leaders' writes
// only one can commit, and the id never changes once written.
func (s *Server) ensureClusterID(ctx context.Context) error {
	if !s.b.IsLeader() || clusterIDOf(s.b.DomainGet) != "" || !version.Gate(func() version.Format { return clusterFormatOf(s.b) }).Allows(version.Format2) {
		return nil
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("admin: cluster id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	put := []raftfsm.Mutation{raftfsm.Put(cluster.ClusterIDKey, []byte(id))}
	f, ok := s.b.(fencer)
	if !ok {
		return s.b.Mutate(ctx, put)
	}
	term, err := f.LeaderBarrier(ctx)
	if err != nil {
		return fmt.Errorf("admin: cluster id: no barrier: %w", err)
	}
	if clusterIDOf(s.b.DomainGet) != "" {
		return nil
	}
	if err := f.MutateInTerm(ctx, term, put); err != nil {
		return fmt.Errorf("admin: cluster id: %w", err)
	}
	s.log.Info("cluster id written", "cluster_id", id)
	return nil
}
