package clustertest

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
)

// TransferLeadership hands leadership to master to (raft's leadership
// transfer: no master is killed), then waits until it leads with its
// services running and every running master names it as the leader, so
// that standbys forward to it at once. A no-op wait if it leads already.
// Fails the test on error (test goroutine only).
func (c *Cluster) TransferLeadership(to int) {
	c.t.Helper()
	c.WaitForNil(fmt.Sprintf("leadership moved to %s", c.masters[to].ID), func() error {
		if li, _ := c.LeaderNow(); li != to {
			if li < 0 {
				return fmt.Errorf("no single leader")
			}
			from := c.masters[li].Node()
			if from == nil {
				return fmt.Errorf("leader %d is down", li)
			}
			m := c.masters[to]
			var addr raft.ServerAddress
			for _, p := range m.cfg.Peers {
				if p.ID == m.ID {
					addr = raft.ServerAddress(p.Address)
				}
			}
			if err := from.Raft().LeadershipTransferToServer(raft.ServerID(m.ID), addr).Error(); err != nil {
				return fmt.Errorf("transfer from %s: %w", c.masters[li].ID, err)
			}
			return fmt.Errorf("%s does not lead yet", m.ID)
		}
		return c.leaderKnown(to)
	})
}

// WaitLeaderKnown waits until some master leads and every running master
// names it as the leader and knows its admin address (a standby that does not know the leader yet
// refuses calls instead of forwarding them), and returns its index.
func (c *Cluster) WaitLeaderKnown() int {
	c.t.Helper()
	var li int
	c.WaitForNil("every running master knows the leader", func() error {
		if li, _ = c.LeaderNow(); li < 0 {
			return fmt.Errorf("no single leader")
		}
		return c.leaderKnown(li)
	})
	return li
}

func (c *Cluster) leaderKnown(li int) error {
	l := c.masters[li]
	members, err := c.membersOf(l)
	if err != nil {
		return err
	}
	for _, m := range c.masters {
		n := m.Node()
		if n == nil {
			continue
		}
		if !members[m.ID] {
			// Removed from the configuration (perhaps by the test,
			// racing this wait): no leader heartbeats it any more, so
			// it names none, and forwards nothing.
			continue
		}
		if id, _ := n.Leader(); id != l.ID {
			return fmt.Errorf("%s names %q as the leader", m.ID, id)
		}
		// A standby forwards to the admin address the leader registered.
		if a, _ := n.FSM().Get(cluster.AdminAddrKey(l.ID)); string(a) != l.addr {
			return fmt.Errorf("%s has %q as %s's admin address", m.ID, a, l.ID)
		}
	}
	return nil
}

// membersOf is the set of ids in the Raft configuration l holds.
func (c *Cluster) membersOf(l *Master) (map[string]bool, error) {
	n := l.Node()
	if n == nil {
		return nil, fmt.Errorf("leader %s is down", l.ID)
	}
	f := n.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("configuration of %s: %w", l.ID, err)
	}
	ids := make(map[string]bool, len(f.Configuration().Servers))
	for _, s := range f.Configuration().Servers {
		ids[string(s.ID)] = true
	}
	return ids, nil
}
