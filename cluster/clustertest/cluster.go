package clustertest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/security"
	"github.com/baton-dev/baton/store"
)

// Test timings of the domain: leases short enough that a crashed region
// server is detected in about two seconds, long enough that -race and a
// loaded machine never expire a live one (heartbeats every 200 ms against
// a 1.5 s hard limit). A region server fences itself 3 heartbeats (600 ms)
// after the last renewal it sent: shorter, and a loaded failover makes
// servers drop their regions.
const (
	SoftLimit = 800 * time.Millisecond
	HardLimit = 1500 * time.Millisecond
	Heartbeat = 200 * time.Millisecond
)

// Config describes a test cluster. Zero fields take the defaults given.
type Config struct {
	// Masters is the number of masters. Default 3.
	Masters int
	// RegionServers is the number of region servers started (rs1, rs2, …)
	// once a leader is elected. Default 0.
	RegionServers int
	// TCP runs Raft over loopback TCP with the bolt log and file snapshot
	// stores in each master's DataDir, as the baton binary does. Default:
	// raft's in-memory transport and stores, which Partition and Pause
	// need.
	TCP bool
	// NoDomain starts masters without the domain (no tables, regions or
	// region servers): a bare cluster.Node under the admin API, whose
	// procedures see Env as their Context.Env. For tests of the node and
	// of the procedure engine through Raft. RegionServers must be 0.
	NoDomain bool
	// Register adds procedure types to each master's registry, after the
	// diagnostic types (cluster/diag) and, unless NoDomain, the domain's.
	Register func(*procedure.Registry) error
	// Env, with NoDomain, gives master id's procedures their Context.Env.
	// Default nil.
	Env func(id string) any
	// Node adjusts master i's node configuration before it first starts
	// (a restart reuses it). Default: the fast timings raft's own tests
	// use (50 ms heartbeat, election and lease timeouts), no fsync, 8
	// workers.
	Node func(i int, c *cluster.Config)
	// Domain adjusts master i's domain configuration (leases, dispatcher,
	// fail points). Default: the test timings above, a dispatcher with
	// short delays and retries. The dispatcher's transport is a
	// dispatch.GRPCTransport through Faults(); a test that sets its own
	// Transport owns it.
	Domain func(i int, c *domain.Config)
	// RegionServer adjusts each region server's configuration (latency,
	// failure rate) when StartRegionServer starts it, before the tweaks
	// StartRegionServer was given.
	RegionServer func(c *regionserver.Config)
	// FaultSeed seeds the fault injector's draws, to replay a failure.
	// Default 0: the injector picks one, which is logged.
	FaultSeed uint64
	// WaitTimeout bounds WaitLeader, region server registration and the
	// retries of Submit. Default 30 s: a bound on failures, not a
	// measure of speed.
	WaitTimeout time.Duration
	// HTTP gives each master its HTTP endpoints, as the baton binary
	// serves them: /status, /readyz, /metrics and the web console
	// (cluster/console) at "/", on a loopback address that stays the same
	// across restarts (Master.HTTPAddr) and is registered with the admin
	// address. Default: none.
	HTTP bool
	// Admin adjusts master i's admin server configuration before each
	// start (scheduled snapshots: Snapshots; their metrics go to the
	// master's registry unless the tweak names one). Default: none.
	Admin func(i int, c *admin.Config)
	// Audit gives each master an audit trail (admin.Config.Access without
	// enforcement: every call that changes state recorded before it is
	// answered), as the baton binary runs. Default: none.
	Audit bool
	// PKI serves each master's admin API over mutual TLS with
	// certificates of this test CA, enforcing access control as an agent
	// with --tls-* does (--acl on): Grants are its --acl-initial-grants.
	// The masters forward to one another, and the cluster's own
	// connections (Master.Admin, WaitLeader) call, as masters. Raft stays
	// in memory, and region servers and HTTP are not supported with it
	// (New fails the test). Default nil: plaintext.
	PKI *security.TestPKI
	// Grants binds clients (baton://client/<name>) to permissions, with
	// PKI.
	Grants map[string]security.Permission
	// NoClusterSecret runs the masters without a cluster secret
	// (admin.Config.ClusterSecret), as a plaintext cluster of agents
	// started without --cluster-secret: what a master says of a call it
	// forwards is then not believed. Default: the masters share one,
	// made for the cluster.
	NoClusterSecret bool
	// SteadyLeader runs raft at SteadyRaftTimeout instead of raft's test
	// timings (50 ms), before Node's tweaks: for tests that name the
	// leader and a standby and walk through them one call after the
	// other, which a loaded machine's leadership change would otherwise
	// fail for no fault of the code under test. Elections then take a
	// second or so. Default false.
	SteadyLeader bool
	// LogLevel of the per-node log buffers. Default hclog.Info.
	LogLevel hclog.Level
	// LogTail is how many bytes of each buffer a failed test prints.
	// Default 8000.
	LogTail int
	// AdminAddrs are the masters' admin addresses, one a master (the
	// region servers' and clients' Masters list): a cluster that takes
	// over another's addresses, as one restored in its place does for
	// the region servers that outlived the old masters. Default: a free
	// loopback port each.
	AdminAddrs []string
	// TracerProvider, when set, traces every master (executors,
	// dispatchers, the Master service) and region server, as the
	// OTEL_* environment does for the binary: give it an SDK provider
	// with an in-memory exporter to assert on spans. Default nil: no spans.
	TracerProvider trace.TracerProvider
}

// SteadyRaftTimeout is the heartbeat, election and leader lease timeout
// of a SteadyLeader cluster: ten times raft's test timings, still well
// under a real deployment's.
const SteadyRaftTimeout = 500 * time.Millisecond

func (c *Config) setDefaults() {
	if c.Masters == 0 {
		c.Masters = 3
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = 30 * time.Second
	}
	if c.LogLevel == hclog.NoLevel {
		c.LogLevel = hclog.Info
	}
	if c.LogTail == 0 {
		c.LogTail = 8000
	}
}

// Cluster is a running test cluster. Its methods may be called from any
// goroutine, except those that fail the test (documented as such), which
// belong to the test's goroutine as t.Fatal does.
type Cluster struct {
	t       testing.TB
	cfg     Config
	faults  *rpcfault.Injector
	logs    *logSet
	masters []*Master
	// secret is the masters' cluster secret ("" with NoClusterSecret).
	secret string

	mu      sync.Mutex
	rss     map[string]*regionserver.Server
	stopped map[string]bool
	// mesh links the masters' in-memory raft transports (nil on TCP).
	mesh   *testnet.Mesh
	pauses map[int]*time.Timer
	closed bool
}

// New starts a cluster, waits for its leader, the cluster version its
// masters' builds allow and its region servers' registrations, and stops
// it all when the test ends.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	cfg.setDefaults()
	if cfg.NoDomain && cfg.RegionServers > 0 {
		t.Fatal("clustertest: region servers need the domain (NoDomain with RegionServers)")
	}
	if cfg.PKI != nil && (cfg.RegionServers > 0 || cfg.HTTP) {
		t.Fatal("clustertest: PKI runs no region servers and no HTTP")
	}
	c := &Cluster{t: t, cfg: cfg, logs: newLogSet(cfg.LogLevel),
		rss: map[string]*regionserver.Server{}, stopped: map[string]bool{}, pauses: map[int]*time.Timer{}}
	if !cfg.NoClusterSecret {
		c.secret = rand.Text()
	}
	c.faults = rpcfault.New(rpcfault.Config{Seed: cfg.FaultSeed, Logger: c.logs.logger("faults")})
	t.Logf("clustertest: fault seed %d", c.faults.Seed())
	// The masters' directories come from t.TempDir, whose removal is a
	// cleanup registered at its first call, and cleanups run last first:
	// called after the one below, the directories went while the nodes
	// still ran, and a snapshot written meanwhile failed the removal
	// ("snapshots: directory not empty"). Called here, they go after the
	// nodes have stopped.
	_ = t.TempDir()
	t.Cleanup(func() {
		c.close()
		c.printLogs()
	})

	var peers []cluster.Peer
	for i := range cfg.Masters {
		m := &Master{c: c, index: i, ID: fmt.Sprintf("m%d", i+1), metrics: prometheus.NewRegistry()}
		if err := admin.InstallRaftMetrics(m.metrics); err != nil {
			t.Fatalf("clustertest: raft metrics: %v", err)
		}
		m.cfg = c.nodeConfig(i, m.ID)
		m.cfg.Metrics = m.metrics
		m.cfg.TracerProvider = cfg.TracerProvider
		if cfg.TCP {
			m.cfg.RaftAddr = testnet.FreeAddr(t)
			m.cfg.TransportTimeout = 2 * time.Second
			peers = append(peers, cluster.Peer{ID: m.ID, Address: m.cfg.RaftAddr})
		} else {
			addr, tr := raft.NewInmemTransport("")
			m.raftTrans = tr
			m.cfg.Transport = tr
			ls := raft.NewInmemStore()
			m.cfg.LogStore, m.cfg.StableStore = ls, ls
			m.cfg.SnapshotStore = raft.NewInmemSnapshotStore()
			peers = append(peers, cluster.Peer{ID: m.ID, Address: string(addr)})
		}
		c.masters = append(c.masters, m)
	}
	for i, m := range c.masters {
		m.cfg.Peers = peers
		if cfg.SteadyLeader {
			m.cfg.HeartbeatTimeout = SteadyRaftTimeout
			m.cfg.ElectionTimeout = SteadyRaftTimeout
			m.cfg.LeaderLeaseTimeout = SteadyRaftTimeout
		}
		if cfg.Node != nil {
			cfg.Node(i, &m.cfg)
		}
	}
	if !cfg.TCP {
		var trans []*raft.InmemTransport
		for _, m := range c.masters {
			trans = append(trans, m.raftTrans)
		}
		c.mesh = testnet.NewMesh(trans...)
	}
	// Every admin address is known before any master starts, so that
	// region servers (and clients) can be given all of them.
	if n := len(cfg.AdminAddrs); n != 0 && n != cfg.Masters {
		t.Fatalf("clustertest: %d AdminAddrs for %d masters", n, cfg.Masters)
	}
	for i, m := range c.masters {
		addr := "127.0.0.1:0"
		if cfg.AdminAddrs != nil {
			addr = cfg.AdminAddrs[i]
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("clustertest: admin listener: %v", err)
		}
		m.addr = lis.Addr().String()
		m.lis = lis
		if cfg.HTTP {
			hl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("clustertest: HTTP listener: %v", err)
			}
			m.httpAddr = hl.Addr().String()
			m.httpLis = hl
		}
	}
	for _, m := range c.masters {
		if err := m.start(); err != nil {
			t.Fatalf("clustertest: %v", err)
		}
	}
	c.WaitLeader()
	c.waitClusterFormat()
	for i := range cfg.RegionServers {
		c.StartRegionServer(fmt.Sprintf("rs%d", i+1))
	}
	return c
}

// nodeConfig is master id's configuration before the test's tweaks.
func (c *Cluster) nodeConfig(i int, id string) cluster.Config {
	n := cluster.DefaultConfig()
	n.ID = id
	n.DataDir = c.t.TempDir()
	n.HeartbeatTimeout = 50 * time.Millisecond
	n.ElectionTimeout = 50 * time.Millisecond
	n.LeaderLeaseTimeout = 50 * time.Millisecond
	n.CommitTimeout = 5 * time.Millisecond
	n.SnapshotInterval = time.Hour
	n.HealthInterval = 50 * time.Millisecond
	n.BarrierTimeout = 5 * time.Second
	n.RevokeTimeout = time.Second
	n.Workers = 8
	n.Executor = func(pc *procedure.Config) {
		pc.RollbackBackoff = 50 * time.Millisecond
		pc.RollbackBackoffMax = 500 * time.Millisecond
	}
	n.WAL = store.WALConfig{NoSync: true}
	n.RaftNoSync = true
	n.Logger = c.logs.logger(id)
	return n
}

// domainConfig is master i's domain configuration, the test's tweaks
// applied.
func (c *Cluster) domainConfig(m *Master) domain.Config {
	d := domain.Config{
		Logger:            m.cfg.Logger,
		Metrics:           m.metrics,
		TracerProvider:    c.cfg.TracerProvider,
		ServerLease:       lease.Config{SoftLimit: SoftLimit, HardLimit: HardLimit, MonitorInterval: 50 * time.Millisecond},
		HeartbeatInterval: Heartbeat,
		Dispatch:          dispatch.Config{Delay: 10 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxFailures: 10, CallTimeout: 2 * time.Second},
		DispatchTimeout:   2 * time.Second,
		RetryBackoff:      procedure.Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.1},
	}
	if c.cfg.Domain != nil {
		c.cfg.Domain(m.index, &d)
	}
	return d
}

func (c *Cluster) registry() (*procedure.Registry, error) {
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		return nil, err
	}
	if !c.cfg.NoDomain {
		if err := domain.Register(reg); err != nil {
			return nil, err
		}
	}
	if c.cfg.Register != nil {
		if err := c.cfg.Register(reg); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Masters returns the masters, running or not, by index.
func (c *Cluster) Masters() []*Master { return c.masters }

// Master returns master i.
func (c *Cluster) Master(i int) *Master { return c.masters[i] }

// Faults is the injector on every master's gRPC server and on the
// dispatchers' calls to region servers. It has no rules until the test
// adds some.
func (c *Cluster) Faults() *rpcfault.Injector { return c.faults }

// AdminAddrs are the masters' admin API addresses, by index; they stay
// the same across restarts.
func (c *Cluster) AdminAddrs() []string {
	out := make([]string, len(c.masters))
	for i, m := range c.masters {
		out[i] = m.addr
	}
	return out
}

// Client returns a client of every master's admin API, with short
// backoffs, closed when the test ends. opts come after the defaults.
// Fails the test on error (test goroutine only).
func (c *Cluster) Client(opts ...client.Option) *client.Client {
	c.t.Helper()
	cl, err := client.New(c.AdminAddrs(), append([]client.Option{client.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}, opts...)...)
	if err != nil {
		c.t.Fatalf("clustertest: client: %v", err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// ClientAs is Client calling as client name, with a certificate of
// Config.PKI naming baton://client/<name>.
func (c *Cluster) ClientAs(name string, opts ...client.Option) *client.Client {
	c.t.Helper()
	if c.cfg.PKI == nil {
		c.t.Fatal("clustertest: ClientAs needs Config.PKI")
	}
	creds := c.cfg.PKI.MustCredentials(security.Identity{Role: security.RoleClient, ID: name})
	return c.Client(append([]client.Option{client.WithDialOptions(creds.DialOption(security.RoleMaster))}, opts...)...)
}

// Logs returns what component name ("m1", "rs2", "faults") has logged so
// far, at Config.LogLevel (or BATON_TEST_LOG's level).
func (c *Cluster) Logs(name string) string { return c.logs.text(name) }

// Close stops the cluster now, for a test (or benchmark) that starts
// several in turn; the cleanup New registered calls it otherwise. Later
// calls do nothing.
func (c *Cluster) Close() { c.close() }

// close stops everything, region servers first.
func (c *Cluster) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for _, tm := range c.pauses {
		tm.Stop()
	}
	c.mu.Unlock()
	live := c.RegionServers()
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := live[id].Stop(ctx); err != nil {
			c.t.Logf("clustertest: stop %s: %v", id, err)
		}
		cancel()
	}
	for _, m := range c.masters {
		m.kill()
		if m.lis != nil {
			_ = m.lis.Close()
		}
		if m.httpLis != nil {
			_ = m.httpLis.Close()
		}
	}
}

// printLogs prints the logs' tails, once, if the test failed.
func (c *Cluster) printLogs() {
	if c.t.Failed() && !c.logs.stderr {
		c.logs.print(c.t, c.cfg.LogTail)
	}
}
