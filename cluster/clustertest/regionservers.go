package clustertest

import (
	"context"
	"time"

	"github.com/baton-dev/baton/cluster/regionserver"
)

// StartRegionServer starts region server id (again, if it was stopped:
// a new incarnation under the same id) and waits for its registration
// with the leader. Config.RegionServer, then tweaks, adjust its
// configuration. Test goroutine only.
func (c *Cluster) StartRegionServer(id string, tweaks ...func(*regionserver.Config)) *regionserver.Server {
	c.t.Helper()
	if c.cfg.NoDomain {
		c.t.Fatal("clustertest: region servers need the domain (Config.NoDomain is set)")
	}
	cfg := regionserver.Config{
		ID: id, GRPCAddr: "127.0.0.1:0", Masters: c.AdminAddrs(),
		RPCTimeout: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: c.logs.logger(id), TracerProvider: c.cfg.TracerProvider,
	}
	if c.cfg.RegionServer != nil {
		c.cfg.RegionServer(&cfg)
	}
	for _, f := range tweaks {
		f(&cfg)
	}
	s, err := regionserver.New(cfg)
	if err != nil {
		c.t.Fatalf("clustertest: region server %s: %v", id, err)
	}
	if err := s.Start(context.Background()); err != nil {
		c.t.Fatalf("clustertest: start region server %s: %v", id, err)
	}
	c.mu.Lock()
	c.rss[id] = s
	delete(c.stopped, id)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WaitTimeout)
	defer cancel()
	if _, err := s.WaitRegistered(ctx); err != nil {
		c.t.Fatalf("clustertest: region server %s registration: %v", id, err)
	}
	return s
}

// StopRegionServer stops region server id as a crash looks from outside:
// it answers no more calls and sends no more heartbeats.
func (c *Cluster) StopRegionServer(id string) {
	c.mu.Lock()
	s := c.rss[id]
	if s == nil || c.stopped[id] {
		c.mu.Unlock()
		return
	}
	c.stopped[id] = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		c.t.Logf("clustertest: stop %s: %v", id, err)
	}
}

// RegionServer returns region server id's current incarnation, running
// or stopped, or nil if it never started.
func (c *Cluster) RegionServer(id string) *regionserver.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rss[id]
}

// RegionServers returns the running region servers by id.
func (c *Cluster) RegionServers() map[string]*regionserver.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*regionserver.Server{}
	for id, s := range c.rss {
		if !c.stopped[id] {
			out[id] = s
		}
	}
	return out
}
