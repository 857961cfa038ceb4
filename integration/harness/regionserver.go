package harness

import (
	"context"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/proto/rspb"
)

// RSOptions configures the region servers StartRegionServers starts.
type RSOptions struct {
	// OpLatency is --op-latency: how long each open or close takes.
	OpLatency time.Duration
	// FailureRate is --failure-rate: the probability an open fails.
	FailureRate float64
	// HeartbeatInterval is --heartbeat-interval (0: the master's).
	HeartbeatInterval time.Duration
	// LogLevel is the region servers' BATON_LOG_LEVEL (default: the
	// cluster's Options.LogLevel). "debug" logs every open and close with
	// the term of the batch that carried it.
	LogLevel string
	// Env is added to every region server's environment (KEY=VALUE).
	Env []string
	// HTTP gives each region server --http-addr (/metrics, /readyz) on a
	// loopback port of its own (RegionServer.HTTPAddr).
	HTTP bool
}

// RegionServer is one `baton regionserver` process of a Cluster. Its id and
// address stay the same across restarts (a restart is a new incarnation:
// it registers for a new start code).
type RegionServer struct {
	ID       string
	GRPCAddr string
	// HTTPAddr is its --http-addr, empty without RSOptions.HTTP.
	HTTPAddr string
	LogPath  string
	// UID is the uid the region server runs as (Options.UIDBase), 0 when
	// it runs as the test does.
	UID uint32

	args []string
	env  []string
	// retired: killed for good by RetireRS, guarded by the cluster's mu.
	retired bool
	proc
}

// StartRegionServers starts n region servers, named rs<k> after those
// already started (rs1..rsN on the first call), each on its own loopback
// port, with every master's admin address as --masters. It does not wait
// for them to register (see WaitRegionServers).
func (c *Cluster) StartRegionServers(n int, opts RSOptions) []*RegionServer {
	c.t.Helper()
	level := opts.LogLevel
	if level == "" {
		level = c.opts.LogLevel
	}
	masters := ""
	for i, a := range c.AdminAddrs() {
		if i > 0 {
			masters += ","
		}
		masters += a
	}
	ports := FreePorts(c.t, n)
	var httpPorts []string
	if opts.HTTP {
		httpPorts = FreePorts(c.t, n)
	}
	var out []*RegionServer
	for i := range n {
		id := fmt.Sprintf("rs%d", len(c.RegionServers)+1)
		s := &RegionServer{
			ID:       id,
			GRPCAddr: ports[i],
			LogPath:  filepath.Join(c.dir, id, "regionserver.log"),
			env:      append([]string{"BATON_LOG_LEVEL=" + level}, opts.Env...),
		}
		s.args = []string{"regionserver", "--id", id, "--grpc-addr", s.GRPCAddr, "--masters", masters}
		s.args = append(s.args, c.tlsArgs(security.Identity{Role: security.RoleRegionServer, ID: id})...)
		if opts.HTTP {
			s.HTTPAddr = httpPorts[i]
			s.args = append(s.args, "--http-addr", s.HTTPAddr)
		}
		if opts.OpLatency > 0 {
			s.args = append(s.args, "--op-latency", opts.OpLatency.String())
		}
		if opts.FailureRate > 0 {
			s.args = append(s.args, "--failure-rate", strconv.FormatFloat(opts.FailureRate, 'g', -1, 64))
		}
		if opts.HeartbeatInterval > 0 {
			s.args = append(s.args, "--heartbeat-interval", opts.HeartbeatInterval.String())
		}
		if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
			c.t.Fatalf("harness: %v", err)
		}
		if c.opts.UIDBase > 0 {
			// It keeps no data: its log is opened by the harness.
			s.UID = c.opts.UIDBase + 100 + uint32(len(c.RegionServers)+1)
			s.uid = s.UID
		}
		s.bin = c.binaryFor(id)
		c.mu.Lock()
		c.RegionServers = append(c.RegionServers, s)
		c.mu.Unlock()
		if err := s.run(s.ID, s.bin.Path, s.args, s.env, s.LogPath); err != nil {
			c.t.Fatalf("harness: start %s: %v", id, err)
		}
		out = append(out, s)
	}
	return out
}

// RegionServer returns the region server with this id; it fails the test
// if there is none.
func (c *Cluster) RegionServer(id string) *RegionServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.RegionServers {
		if s.ID == id {
			return s
		}
	}
	c.t.Fatalf("harness: no region server %q", id)
	return nil
}

// RegionServerIDs returns the ids of every region server started, running
// or not, but those retired (RetireRS).
func (c *Cluster) RegionServerIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, s := range c.RegionServers {
		if !s.retired {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// RetireRS kills region server id for good, as a machine lost and never
// replaced under its name: from then on RegionServerIDs leaves it out, so
// the checks that read every region server (WaitRegionServers, the chaos
// suite's sampler and audit) stop expecting an answer from it. Its log is
// kept. It cannot be restarted.
func (c *Cluster) RetireRS(id string) {
	c.t.Helper()
	s := c.RegionServer(id)
	c.must("kill", id, s.kill())
	c.mu.Lock()
	s.retired = true
	c.mu.Unlock()
}

// KillRS sends SIGKILL to region server id and waits until it has exited:
// its regions vanish with it, it sends nothing more, and the masters learn
// of it only when its lease expires.
func (c *Cluster) KillRS(id string) {
	c.t.Helper()
	c.must("kill", id, c.RegionServer(id).kill())
}

// TermRS sends SIGTERM to region server id, the way an operator stops it,
// and waits for it to exit, at most timeout (then it is killed). It returns
// the exit code, -1 when it did not exit in time.
func (c *Cluster) TermRS(id string, timeout time.Duration) int {
	c.t.Helper()
	s := c.RegionServer(id)
	if err := s.p.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatalf("harness: term %s: %v", id, err)
	}
	select {
	case <-s.p.Done():
	case <-time.After(timeout):
		_ = s.p.Kill()
		return -1
	}
	return s.p.ExitCode()
}

// RestartRS starts region server id again with the same command line (same
// id and address). The process must have exited.
func (c *Cluster) RestartRS(id string) {
	c.t.Helper()
	s := c.RegionServer(id)
	if locked.Load(&c.mu, &s.retired) {
		c.t.Fatalf("harness: restart %s: it was retired", id)
	}
	c.must("restart", id, s.run(s.ID, locked.Load(&c.mu, &s.bin).Path, s.args, s.env, s.LogPath))
}

// RestartRSWith starts region server id again as RestartRS does, with
// binary b from now on. Every region server flag the harness passes is
// known to every release. The process must have exited.
func (c *Cluster) RestartRSWith(id string, b Binary) {
	c.t.Helper()
	s := c.RegionServer(id)
	c.mu.Lock()
	s.bin = b
	c.mu.Unlock()
	c.must("restart", id, s.run(s.ID, b.Path, s.args, s.env, s.LogPath))
}

// PauseRS and ResumeRS send SIGSTOP and SIGCONT to region server id;
// PauseRS returns once every thread of it has stopped (see Pause).
func (c *Cluster) PauseRS(id string) {
	c.t.Helper()
	c.must("pause", id, c.RegionServer(id).pause())
}

// ResumeRS: see PauseRS.
func (c *Cluster) ResumeRS(id string) {
	c.t.Helper()
	c.must("resume", id, c.RegionServer(id).signal(syscall.SIGCONT))
}

// RSLog returns what region server id has logged since its latest start.
func (c *Cluster) RSLog(id string) string {
	s := c.RegionServer(id)
	return s.currentLog()
}

// RSLogSize returns the size of region server id's log file now, an
// offset for RSLogSince.
func (c *Cluster) RSLogSize(id string) int64 {
	st, err := os.Stat(c.RegionServer(id).LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// RSLogSince returns what region server id's log file holds past offset
// (RSLogSize), across restarts.
func (c *Cluster) RSLogSince(id string, offset int64) string {
	b, err := os.ReadFile(c.RegionServer(id).LogPath)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// RSClient returns a RegionServer service client of region server id
// (one connection per server, closed at cleanup): the server's own
// answers (ListRegions), or a hand-made master request (ExecuteBatch).
func (c *Cluster) RSClient(id string) rspb.RegionServerClient {
	c.t.Helper()
	s := c.RegionServer(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rsConns == nil {
		c.rsConns = map[string]*grpc.ClientConn{}
	}
	cc := c.rsConns[id]
	if cc == nil {
		var err error
		cc, err = grpc.NewClient(s.GRPCAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.DialOptions(security.RoleRegionServer)...)...)
		if err != nil {
			c.t.Fatalf("harness: client of %s: %v", id, err)
		}
		c.rsConns[id] = cc
	}
	return rspb.NewRegionServerClient(cc)
}

// RSRegions asks region server id which regions it hosts now (its own
// answer, under its current start code; 0 while it is not registered).
// Each attempt is bounded by 2 s.
func (c *Cluster) RSRegions(ctx context.Context, id string) (*rspb.ListRegionsResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rspb.ListAllRegions(cctx, c.RSClient(id))
}

// WaitRegionServers waits until every running region server holds a
// start code (it registered) and the masters list it, with that start
// code, as live. It returns the start codes by id.
func (c *Cluster) WaitRegionServers(ctx context.Context) (map[string]uint64, error) {
	var last error
	for {
		codes, err := c.registered(ctx)
		if err == nil {
			return codes, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("harness: region servers not registered: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) registered(ctx context.Context) (map[string]uint64, error) {
	codes := map[string]uint64{}
	for _, id := range c.RegionServerIDs() {
		if !c.RegionServer(id).Running() {
			continue
		}
		r, err := c.RSRegions(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if r.GetStartCode() == 0 {
			return nil, fmt.Errorf("%s: not registered", id)
		}
		codes[id] = r.GetStartCode()
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	srvs, err := c.Client().ListServers(sctx)
	if err != nil {
		return nil, err
	}
	live := map[string]uint64{}
	for _, s := range srvs {
		if s.GetLeaseState() == "live" {
			live[s.GetId()] = s.GetStartCode()
		}
	}
	for id, sc := range codes {
		if live[id] != sc {
			return nil, fmt.Errorf("%s: masters list start code %d live, the server holds %d", id, live[id], sc)
		}
	}
	if len(codes) == 0 {
		return nil, errors.New("no region server is running")
	}
	return codes, nil
}
