package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
)

// gatedLogStore holds every StoreLogs while closed: a member whose disk
// stalls, which receives the leader's requests (and learns its commit
// index) but cannot take their entries.
type gatedLogStore struct {
	raft.LogStore
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *gatedLogStore) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
}

func (g *gatedLogStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedLogStore) wait() {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (g *gatedLogStore) StoreLog(l *raft.Log) error {
	g.wait()
	return g.LogStore.StoreLog(l)
}

func (g *gatedLogStore) StoreLogs(ls []*raft.Log) error {
	g.wait()
	return g.LogStore.StoreLogs(ls)
}

// probe asks h for path as a kubelet does: no credentials.
func probe(h http.Handler, path string) (int, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w.Code, strings.TrimSpace(w.Body.String())
}

// /readyz on a follower: ready once it follows a leader it has caught up
// with; not ready, saying why, while it is behind (restarted onto a log
// it cannot extend yet), or cut off from the others (no leader known).
// /livez answers 200 all along, on the follower as on the candidate a cut
// off member becomes, and 503 once the node is shut down.
func TestReadyzFollowsCatchUpAndLivezRole(t *testing.T) {
	stores := make([]*gatedLogStore, 3)
	c := clustertest.New(t, clustertest.Config{NoDomain: true, Node: func(i int, nc *cluster.Config) {
		nc.ReadyMaxLag = 5
		stores[i] = &gatedLogStore{LogStore: nc.LogStore}
		nc.LogStore = stores[i]
	}})
	// Before the cluster stops (cleanups run last first): a closed gate
	// would hold its member's raft.
	t.Cleanup(func() {
		for _, s := range stores {
			s.open()
		}
	})
	li := c.WaitLeaderKnown()
	leader := c.Master(li)
	f := (li + 1) % 3
	fm := c.Master(f)

	want := func(m *clustertest.Master, path string, code int, body string) {
		t.Helper()
		var got string
		c.WaitForNil(fmt.Sprintf("%s %s: %d %q", m.ID, path, code, body), func() error {
			h := m.HTTPHandler()
			if h == nil {
				return fmt.Errorf("%s is down", m.ID)
			}
			gotCode, b := probe(h, path)
			got = b
			if gotCode != code || !strings.Contains(b, body) {
				return fmt.Errorf("%d %q", gotCode, b)
			}
			return nil
		})
		t.Logf("%s %s: %s", m.ID, path, got)
	}

	want(fm, "/readyz", 200, "ready: following "+leader.ID)
	want(leader, "/readyz", 200, "ready: leader")
	want(fm, "/livez", 200, "live: alive (follower)")

	// Behind: restarted after the others went on, onto a log store that
	// takes no entries. It knows the leader and its commit index, and is
	// not ready until it has caught up.
	c.Kill(f)
	for i := range 20 {
		c.SeedRecord(fmt.Sprintf("test/probe/%d", i), []byte("x"))
	}
	stores[f].close()
	c.Restart(f)
	want(fm, "/readyz", 503, "not ready: catching up")
	if id, _ := fm.Node().Leader(); id != leader.ID {
		t.Errorf("%s names leader %q while behind, want %s (not ready for lag, not for want of a leader)", fm.ID, id, leader.ID)
	}
	want(fm, "/livez", 200, "live: alive")
	stores[f].open()
	want(fm, "/readyz", 200, "ready: following "+leader.ID)

	// Cut off: no leader known, not ready; alive as a candidate.
	c.Partition(f)
	want(fm, "/readyz", 503, "not ready: no leader known")
	want(fm, "/livez", 200, "live: alive (candidate)")
	c.Heal()
	want(fm, "/readyz", 200, "ready: following")

	// Shut down: not alive (nor ready).
	h := fm.HTTPHandler()
	c.Kill(f)
	if code, body := probe(h, "/livez"); code != 503 || !strings.Contains(body, "not live: node shut down") {
		t.Errorf("/livez of a shut down node: %d %q, want 503 not live: node shut down", code, body)
	}
	if code, body := probe(h, "/readyz"); code != 503 {
		t.Errorf("/readyz of a shut down node: %d %q, want 503", code, body)
	}
}
