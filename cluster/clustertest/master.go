package clustertest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Master is one master of a test cluster: its Raft node, its domain and
// its admin gRPC server (which also carries the Master service region
// servers call). A killed master's node, domain and admin client are nil
// until it is restarted.
type Master struct {
	// ID is the master's Raft id: m1, m2, … by index.
	ID string

	c     *Cluster
	index int
	cfg   cluster.Config
	addr  string
	// raftTrans is the in-memory Raft transport (nil on TCP); it outlives
	// restarts, so the other masters' links to it stay as the test set
	// them.
	raftTrans *raft.InmemTransport

	// httpAddr is the master's HTTP address with Config.HTTP, else "".
	httpAddr string

	mu      sync.Mutex
	lis     net.Listener // bound, not yet served
	httpLis net.Listener // bound, not yet served
	httpSrv *http.Server
	console *console.Console
	node    *cluster.Node
	dom     *domain.Domain
	srv     *admin.Server
	gs      *grpc.Server
	trans   *dispatch.GRPCTransport // nil if the test gave its own
	cc      *grpc.ClientConn
	client  adminpb.AdminClient
	// leading is the term whose leader services run here, 0 if none.
	leading uint64
	// metrics is the master's registry, kept across restarts (the node and
	// the domain unregister their collectors when they stop, and the next
	// ones register theirs).
	metrics *prometheus.Registry
}

// Metrics is the master's Prometheus registry: what its /metrics serves.
func (m *Master) Metrics() *prometheus.Registry { return m.metrics }

// HTTPHandler is the master's HTTP endpoints (/status, /readyz, /metrics,
// ...; admin.HTTPHandler), nil while it is down.
func (m *Master) HTTPHandler() http.Handler {
	m.mu.Lock()
	n, srv := m.node, m.srv
	m.mu.Unlock()
	if n == nil {
		return nil
	}
	return admin.HTTPHandler(admin.NodeBackend(n), m.metrics, admin.WithDebugEndpoints(), admin.WithLastSnapshot(srv.LastSnapshot))
}

// Index is the master's position in Cluster.Masters.
func (m *Master) Index() int { return m.index }

// AdminAddr is the master's admin API address (the same across restarts).
func (m *Master) AdminAddr() string { return m.addr }

// HTTPAddr is the master's HTTP address (status, metrics, web console),
// the same across restarts; "" without Config.HTTP.
func (m *Master) HTTPAddr() string { return m.httpAddr }

// Config is the master's node configuration (restarts reuse it).
func (m *Master) Config() cluster.Config { return m.cfg }

// Node is the master's Raft node, nil while it is down.
func (m *Master) Node() *cluster.Node { return locked.Load(&m.mu, &m.node) }

// Domain is the master's domain, nil while it is down or with NoDomain.
func (m *Master) Domain() *domain.Domain { return locked.Load(&m.mu, &m.dom) }

// Admin is a client of this master's admin API alone (no leader
// following: calls to a standby are forwarded by it, or refused), nil
// while it is down.
func (m *Master) Admin() adminpb.AdminClient { return locked.Load(&m.mu, &m.client) }

// Conn is the connection behind Admin, for the other services on the
// master's gRPC server (rspb.Master), nil while it is down.
func (m *Master) Conn() *grpc.ClientConn { return locked.Load(&m.mu, &m.cc) }

// Running reports whether the master is up (not killed).
func (m *Master) Running() bool { return m.Node() != nil }

// Executor is the master's executor if it leads, else the node's error
// (cluster.ErrNotLeader, or cluster.ErrNotReady while it is down).
func (m *Master) Executor() (*procedure.Executor, error) {
	n := m.Node()
	if n == nil {
		return nil, fmt.Errorf("clustertest: %s is down: %w", m.ID, cluster.ErrNotReady)
	}
	return n.Executor()
}

// Log is what the master has logged so far, across restarts.
func (m *Master) Log() string { return m.c.logs.text(m.ID) }

// leader reports whether the master leads with a running executor and,
// with the domain, its leader services started for that executor's term.
func (m *Master) leader() (*procedure.Executor, bool) {
	m.mu.Lock()
	n, leading, noDomain := m.node, m.leading, m.c.cfg.NoDomain
	m.mu.Unlock()
	if n == nil {
		return nil, false
	}
	x, err := n.Executor()
	if err != nil {
		return nil, false
	}
	return x, noDomain || leading != 0
}

// start brings the master up on its configuration: node, domain, admin
// API on its address.
func (m *Master) start() error {
	c := m.c
	cfg := m.cfg
	reg, err := c.registry()
	if err != nil {
		return fmt.Errorf("%s: registry: %w", m.ID, err)
	}
	cfg.Registry = reg
	var dom *domain.Domain
	var trans *dispatch.GRPCTransport
	if c.cfg.NoDomain {
		if c.cfg.Env != nil {
			cfg.Env = c.cfg.Env(m.ID)
		}
	} else {
		dcfg := c.domainConfig(m)
		if dcfg.Transport == nil {
			trans = dispatch.NewGRPCTransport(dispatch.GRPCTransportConfig{
				DialOptions: []grpc.DialOption{c.faults.DialOption()}, Logger: cfg.Logger})
			dcfg.Transport = trans
		}
		if dom, err = domain.New(dcfg); err != nil {
			return fmt.Errorf("%s: domain: %w", m.ID, err)
		}
		cfg.Env = dom
		// The wrapper tells WaitLeader that the domain's leader services
		// run, which the node does not show.
		cfg.LeaderServices = func(term uint64, x *procedure.Executor) (func(), error) {
			stop, err := dom.LeaderServices(term, x)
			if err != nil {
				return nil, err
			}
			m.mu.Lock()
			m.leading = term
			m.mu.Unlock()
			return func() {
				m.mu.Lock()
				if m.leading == term {
					m.leading = 0
				}
				m.mu.Unlock()
				stop()
			}, nil
		}
	}
	closeDomain := func() {
		if dom != nil {
			_ = dom.Close()
		}
		if trans != nil {
			trans.Close()
		}
	}
	n, err := cluster.NewNode(cfg)
	if err != nil {
		closeDomain()
		return fmt.Errorf("%s: node: %w", m.ID, err)
	}
	var srv *admin.Server
	acfg := admin.Config{AdvertiseAddr: m.addr, HTTPAddr: m.httpAddr, Logger: cfg.Logger, RegisterInterval: 20 * time.Millisecond, ClusterSecret: c.secret, Metrics: m.metrics}
	if c.cfg.Audit {
		acfg.Access = &admin.Access{}
	}
	if c.cfg.Admin != nil {
		c.cfg.Admin(m.Index(), &acfg)
		if acfg.Snapshots != nil && acfg.Snapshots.Metrics == nil {
			sched := *acfg.Snapshots
			sched.Metrics = m.metrics
			acfg.Snapshots = &sched
		}
	}
	selfDial := grpc.WithTransportCredentials(insecure.NewCredentials())
	var secure []grpc.ServerOption
	if c.cfg.PKI != nil {
		creds := c.cfg.PKI.MustCredentials(security.Identity{Role: security.RoleMaster, ID: m.ID})
		acfg.Access = &admin.Access{Enforce: true, InitialGrants: c.cfg.Grants, OnBootstrap: func(string) {}}
		selfDial = creds.DialOption(security.RoleMaster)
		acfg.DialOptions = []grpc.DialOption{selfDial}
		secure = security.MasterPolicyFor(security.ClientAuthCert, admin.MasterOnlyMethods()...).ServerOptions(creds)
	}
	backend := admin.NodeBackend(n)
	if dom != nil {
		dom.Attach(n)
		backend = admin.WithDomain(backend, dom)
	}
	srv, err = admin.New(backend, acfg)
	if err != nil {
		_ = n.Kill()
		closeDomain()
		return fmt.Errorf("%s: admin: %w", m.ID, err)
	}
	m.mu.Lock()
	lis := m.lis
	m.lis = nil
	m.mu.Unlock()
	if lis == nil {
		if lis, err = net.Listen("tcp", m.addr); err != nil {
			_ = n.Kill()
			closeDomain()
			return fmt.Errorf("%s: admin listener: %w", m.ID, err)
		}
	}
	gopts := append([]grpc.ServerOption{admin.KeepaliveEnforcement()}, c.faults.ServerOptions()...)
	gopts = append(gopts, secure...)
	// Always, as the agent: besides access control and the audit trail
	// (Access), the interceptor checks the cluster secret.
	gopts = append(gopts, grpc.ChainUnaryInterceptor(srv.UnaryInterceptor()), grpc.ChainStreamInterceptor(srv.StreamInterceptor()))
	gopts = append(gopts, admin.RequestLimits()...)
	gs := grpc.NewServer(gopts...)
	srv.RegisterServices(gs)
	if dom != nil {
		domain.RegisterMasterService(gs, dom, admin.Unavailable, srv.RegionServerGrants, srv.RegionServerRefusals)
	}
	if err := srv.Start(m.addr); err != nil {
		_ = lis.Close()
		_ = n.Kill()
		closeDomain()
		return fmt.Errorf("%s: admin start: %w", m.ID, err)
	}
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient(m.addr, selfDial)
	if err != nil {
		gs.Stop()
		_ = n.Kill()
		closeDomain()
		return fmt.Errorf("%s: admin client: %w", m.ID, err)
	}
	hs, con, err := m.serveHTTP(backend, srv)
	if err != nil {
		_ = cc.Close()
		gs.Stop()
		_ = n.Kill()
		closeDomain()
		return err
	}
	m.mu.Lock()
	m.node, m.dom, m.srv, m.gs, m.trans, m.cc = n, dom, srv, gs, trans, cc
	m.httpSrv, m.console = hs, con
	m.client = adminpb.NewAdminClient(cc)
	m.mu.Unlock()
	return nil
}

// serveHTTP serves the master's HTTP endpoints with Config.HTTP: the
// node's (admin.HTTPHandler) and the console, a client of its admin API.
func (m *Master) serveHTTP(b admin.Backend, srv *admin.Server) (*http.Server, *console.Console, error) {
	if m.httpAddr == "" {
		return nil, nil, nil
	}
	m.mu.Lock()
	lis := m.httpLis
	m.httpLis = nil
	m.mu.Unlock()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", m.httpAddr); err != nil {
			return nil, nil, fmt.Errorf("%s: HTTP listener: %w", m.ID, err)
		}
	}
	ccfg := console.Config{AdminAddr: m.addr, Logger: m.cfg.Logger, Refresh: -1}
	if m.c.secret != "" {
		// As an agent's console: the secret to its own node alone.
		ccfg.DialOptions = []grpc.DialOption{security.ClusterSecretDialOptionTo(m.c.secret, m.addr)}
	}
	con, err := console.New(ccfg)
	if err != nil {
		_ = lis.Close()
		return nil, nil, fmt.Errorf("%s: console: %w", m.ID, err)
	}
	hs := &http.Server{Handler: console.Mount(admin.HTTPHandler(b, nil, admin.WithDebugEndpoints(), admin.WithLastSnapshot(srv.LastSnapshot)), con), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	return hs, con, nil
}

// kill crashes the master: Raft stops without handing over, its API goes
// away, its domain and dispatcher transport close. A no-op if it is down.
func (m *Master) kill() {
	m.mu.Lock()
	n, dom, srv, gs, trans, cc := m.node, m.dom, m.srv, m.gs, m.trans, m.cc
	hs, con := m.httpSrv, m.console
	m.node, m.dom, m.srv, m.gs, m.trans, m.cc, m.client, m.leading = nil, nil, nil, nil, nil, nil, nil, 0
	m.httpSrv, m.console = nil, nil
	m.mu.Unlock()
	if n == nil {
		return
	}
	_ = n.Kill()
	gs.Stop()
	if hs != nil {
		_ = hs.Close()
		_ = con.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Stop(ctx)
	cancel()
	_ = cc.Close()
	if dom != nil {
		_ = dom.Close()
	}
	if trans != nil {
		trans.Close()
	}
}
