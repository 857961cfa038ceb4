package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestAutopilotRemovesADeadVoter: with --dead-member-timeout, the leader
// removes a voter that stopped answering once MinQuorum other voters are
// healthy (four voters, one dead, three left), as a cluster remove does:
// out of the configuration, its records gone, an audit record of a
// RemovePeer by this master saying why.
func TestAutopilotRemovesADeadVoter(t *testing.T) {
	const deadAfter = 2 * time.Second
	c := clustertest.New(t, clustertest.Config{Masters: 4, SteadyLeader: true, Audit: true,
		Node: func(_ int, cfg *cluster.Config) {
			cfg.DeadMemberTimeout = deadAfter
			cfg.MinQuorum = 3
		}})
	li, _ := c.WaitLeader()
	dead := (li + 1) % 4
	id := c.Master(dead).ID
	c.WaitForNil(id+" to have registered its admin address", func() error {
		for _, p := range c.Master(li).Node().Status().Peers {
			if p.ID == id && (p.Progress == nil || !p.Progress.Healthy) {
				return fmt.Errorf("%s: %+v", id, p.Progress)
			}
		}
		return nil
	})
	// /status on the leader carries the same view.
	doc := admin.StatusOf(admin.NodeBackend(c.Master(li).Node()))
	for _, p := range doc.Peers {
		if p.Healthy == nil || p.LagEntries == nil || p.LeaderContactMs == nil {
			t.Errorf("/status peer %s: healthy %v, lag %v, contact %v", p.ID, p.Healthy, p.LagEntries, p.LeaderContactMs)
		}
	}
	killed := time.Now()
	c.Kill(dead)
	c.WaitForNil("the leader's autopilot to remove "+id, func() error {
		l := c.Leader()
		peers := l.Node().Status().Peers
		for _, p := range peers {
			if p.ID == id {
				return fmt.Errorf("%s still a member: %+v", id, p.Progress)
			}
		}
		if len(peers) != 3 {
			return fmt.Errorf("%d members", len(peers))
		}
		if _, ok := l.Node().FSM().Get(cluster.AdminAddrKey(id)); ok {
			return fmt.Errorf("%s's admin address still registered", id)
		}
		return nil
	})
	if took := time.Since(killed); took < deadAfter {
		t.Fatalf("removed %v after it died, before the dead-member timeout %v", took, deadAfter)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.WaitForNil("the removal's audit record", func() error {
		resp, err := c.Leader().Admin().ListAudit(ctx, &adminpb.ListAuditRequest{Method: "RemovePeer", PageSize: 100})
		if err != nil {
			return err
		}
		for _, r := range resp.GetRecords() {
			if strings.HasPrefix(r.GetPrincipal(), "master/") && strings.Contains(r.GetMessage(), "autopilot: no answer to the leader") && r.GetCode() == "OK" {
				return nil
			}
		}
		return fmt.Errorf("no autopilot RemovePeer record among %v", resp.GetRecords())
	})
}
