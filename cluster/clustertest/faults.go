package clustertest

import (
	"slices"
	"time"
)

func (c *Cluster) needInmem(op string) {
	if c.cfg.TCP {
		c.t.Fatalf("clustertest: %s needs the in-memory transport (Config.TCP is set)", op)
	}
}

// Partition cuts the Raft traffic between the masters listed and the
// others, both ways; the listed masters keep reaching each other. With one
// index it isolates that master. Admin API and region-server traffic are
// untouched: clients and region servers still reach every master. Needs
// the in-memory transport; fails the test otherwise (test goroutine only).
func (c *Cluster) Partition(group ...int) {
	c.needInmem("Partition")
	c.mesh.Partition(group...)
}

// Heal restores the Raft links of the masters listed with every other
// master, or every link if none is listed, and ends their pauses.
func (c *Cluster) Heal(masters ...int) {
	c.needInmem("Heal")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heal(masters...)
}

func (c *Cluster) heal(masters ...int) {
	c.mesh.Heal(masters...)
	for i, tm := range c.pauses {
		if len(masters) == 0 || slices.Contains(masters, i) {
			tm.Stop()
			delete(c.pauses, i)
		}
	}
}

// Pause stops master i's Raft traffic, both ways, for d, then restores
// it (as Heal(i) would; Heal ends a pause early). It returns at once. To
// its peers the master looks stalled (a long GC pause, SIGSTOP); its own
// timers keep running, so a paused leader steps down once its leader
// lease runs out. Needs the in-memory transport.
func (c *Cluster) Pause(i int, d time.Duration) {
	c.needInmem("Pause")
	c.Partition(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if tm := c.pauses[i]; tm != nil {
		tm.Stop()
	}
	c.pauses[i] = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			c.heal(i)
		}
	})
}

// Connected reports whether master i's Raft traffic reaches master j.
func (c *Cluster) Connected(i, j int) bool {
	return c.cfg.TCP || c.mesh.Connected(i, j)
}

// Kill crashes master i: Raft stops without handing leadership over, its
// storage stays as it is, its admin API and domain go away. A no-op if it
// is down.
func (c *Cluster) Kill(i int) { c.masters[i].kill() }

// Restart starts master i again on its storage (its DataDir and, on the
// in-memory transport, its Raft stores) and its admin address; its Raft
// links are as the test left them. Kills it first if it runs. Fails the
// test on error (test goroutine only).
func (c *Cluster) Restart(i int) *Master {
	c.t.Helper()
	m := c.masters[i]
	m.kill()
	if c.mesh != nil {
		c.mesh.Restore(i)
	}
	if err := m.start(); err != nil {
		c.t.Fatalf("clustertest: restart: %v", err)
	}
	return m
}
