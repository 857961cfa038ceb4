package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/internal/grpcstop"
	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

func init() {
	topLevel.add(topCommand{
		name: "agent", rank: 10, run: (*cli).agent,
		summary: `run a cluster node (--dev: a single-node cluster on loopback, with
simulated region servers in the same process)`,
	})
}

// agent runs `baton agent`: parses its flags, then runs the node until
// SIGINT or SIGTERM.
func (c *cli) agent(args []string) int {
	cfg, err := parseAgentFlags(args, c.getenv, c.stdout, c.stderr)
	if err != nil {
		return c.flagsFailed("agent", err)
	}
	ctx, stop := signal.NotifyContext(c.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runAgent(ctx, cfg, c.stdout, c.stderr); err != nil {
		if errors.Is(err, errRecoveryNotConfirmed) {
			fmt.Fprintf(c.stderr, "baton agent: nothing done: add --yes to recover the quorum as planned\n")
			return exitUsage
		}
		return c.runFailed("agent", err)
	}
	return exitOK
}

// shutdownTimeout bounds a graceful stop (leadership transfer, executor
// stop, raft shutdown).
const shutdownTimeout = 15 * time.Second

// runAgent starts a cluster.Node with the admin gRPC server and the HTTP
// endpoints, prints where they listen, and on ctx's end (SIGINT, SIGTERM)
// shuts down gracefully (leadership transfer first).
func runAgent(ctx context.Context, cfg agentConfig, stdout, stderr io.Writer) error {
	// A test build whose format stamp was refused is not the build its
	// maker meant (internal/version's test hook): run nothing on it.
	if err := semver.StampErr(); err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "baton." + cfg.ID, Level: hclog.LevelFromString(envOr("BATON_LOG_LEVEL", "info")), Output: stderr})
	// First: TLS files it cannot use are a bad command line, said before
	// anything starts.
	tlsc, err := loadAgentTLS(ctx, cfg, logger)
	if err != nil {
		return err
	}
	raiseProcs(os.Getenv, logger)
	tuneGC(os.Getenv, logger)

	a, err := newAgent(ctx, cfg, tlsc, logger)
	if err != nil {
		return err
	}
	defer a.close()
	if err := a.startNode(ctx, stdout); err != nil {
		return err
	}
	if err := a.startAPI(stdout); err != nil {
		a.abort()
		return err
	}
	if err := a.startHTTP(); err != nil {
		a.abort()
		return err
	}
	// a.cfg: the bootstrap guard may have turned a derived-peers start
	// into a join (startNode).
	if len(a.cfg.Join) > 0 {
		go joinCluster(ctx, a.cfg, a.node.StartedEmpty(), tlsc, logger)
	}
	if a.rss, err = startDevRegionServers(ctx, cfg, logger, a.tracing); err != nil {
		a.abort()
		return err
	}
	a.printBanner(stdout)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-a.serveErr:
	case <-a.node.Failed():
		// It applied a cluster version this binary cannot read: exit with
		// the error a start on that state gives.
		runErr = a.node.FailErr()
	}
	a.shutdown()
	return runErr
}

// errRecoveryNotConfirmed ends an agent run with --recover-quorum but
// without --yes, once the plan is printed: exit 2, as every command that
// needs --yes exits without it.
var errRecoveryNotConfirmed = errors.New("quorum recovery not confirmed")

// agent is what a running `baton agent` is made of, filled in as it
// starts: the node, its admin API and HTTP port, and what they share.
type agent struct {
	cfg     agentConfig
	tlsc    *agentTLS
	logger  hclog.Logger
	tracing *tracing

	reg             *procedure.Registry
	metrics         *prometheus.Registry
	listenerMetrics *security.ListenerMetrics
	dom             *domain.Domain

	node *cluster.Node
	srv  *admin.Server
	gs   *grpc.Server
	// apiStarted: srv and gs serve, and an early stop must stop them.
	apiStarted bool
	httpSrv    *http.Server
	con        *console.Console
	rss        []*regionserver.Server
	// serveErr receives the error that ends a server before ctx does.
	serveErr chan error
}

// newAgent makes what the node is built from: the procedure registry,
// the metrics, tracing and the domain. Its close undoes it.
func newAgent(ctx context.Context, cfg agentConfig, tlsc *agentTLS, logger hclog.Logger) (*agent, error) {
	a := &agent{cfg: cfg, tlsc: tlsc, logger: logger, reg: procedure.NewRegistry(), metrics: processMetrics(), serveErr: make(chan error, 2)}
	if err := diag.Register(a.reg); err != nil {
		return nil, err
	}
	if err := domain.Register(a.reg); err != nil {
		return nil, err
	}
	if err := admin.InstallRaftMetrics(a.metrics); err != nil {
		return nil, fmt.Errorf("raft metrics: %w", err)
	}
	var err error
	if a.listenerMetrics, err = security.NewListenerMetrics(a.metrics); err != nil {
		return nil, err
	}
	if a.tracing, err = startTracing(ctx, "baton-master", cfg.ID, logger); err != nil {
		return nil, err
	}
	// The domain (tables, regions, region servers) lives as long as the
	// node; its leader-only services (dispatcher, leases) follow each
	// term through LeaderServices.
	a.dom, err = domain.New(domain.Config{Logger: logger, Metrics: a.metrics, TracerProvider: a.tracing.provider(),
		RegionServerDialOptions: tlsc.dialToRegionServer})
	if err != nil {
		a.tracing.shutdown()
		return nil, err
	}
	return a, nil
}

// close releases what lives as long as the process: the console, the
// domain, tracing.
func (a *agent) close() {
	if a.con != nil {
		a.con.Close()
	}
	a.dom.Close()
	a.tracing.shutdown()
}

// startNode starts the master node: Raft, the FSM, the executor when it
// leads. With --recover-quorum it first prints the recovery's plan on
// stdout, and recovers only with --yes.
//
// A derived-peers member (--initial-cluster-size) asks the others before
// a first bootstrap whether their cluster runs, and joins it if it does
// (bootstrapGuard): then a.cfg.Join is the others' admin addresses.
func (a *agent) startNode(ctx context.Context, stdout io.Writer) error {
	cfg := a.cfg
	ccfg := cluster.DefaultConfig()
	ccfg.ID, ccfg.DataDir, ccfg.RaftAddr, ccfg.Peers = cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Peers
	if cfg.InitialClusterSize > 0 && len(cfg.Peers) > 0 && len(cfg.DerivedAdmin) > 0 {
		g := bootstrapGuard{self: cfg.ID, addrs: cfg.DerivedAdmin, ask: grpcStatusAsker(a.tlsc.dialTo(security.RoleMaster)), logger: a.logger.Named("bootstrap-guard")}
		ccfg.BeforeBootstrap = func() (bool, error) {
			boot, err := g.beforeBootstrap(ctx)
			if err == nil && !boot {
				a.cfg.Join = cfg.DerivedAdmin
			}
			return boot, err
		}
	}
	if cfg.ListenHost != "" {
		ccfg.RaftBind = listenOn(cfg.ListenHost, cfg.RaftAddr)
	}
	ccfg.Registry = a.reg
	ccfg.Logger = a.logger
	ccfg.Metrics, ccfg.TracerProvider = a.metrics, a.tracing.provider()
	ccfg.Env = a.dom
	ccfg.RaftTLS = a.tlsc.creds
	ccfg.RaftConnLimits, ccfg.ListenerMetrics = cfg.ConnLimits, a.listenerMetrics
	ccfg.LeaderServices = a.dom.LeaderServices
	// Other masters are shown the version `baton version` prints.
	ccfg.Build = semver.Current(readBuildInfo().Version)
	if cfg.Workers > 0 {
		ccfg.Workers = cfg.Workers
	}
	cfg.Raft.apply(&ccfg)
	cfg.RaftLog.apply(&ccfg)
	cfg.Autopilot.apply(&ccfg)
	if cfg.RecoverQuorum {
		ccfg.RecoverQuorum = func(plan cluster.QuorumRecoveryPlan) error {
			fmt.Fprint(stdout, plan.String())
			if !cfg.Yes {
				return errRecoveryNotConfirmed
			}
			fmt.Fprintf(stdout, "recovering (--yes)\n")
			return nil
		}
	}
	node, err := cluster.NewNode(ccfg)
	if err != nil {
		return fmt.Errorf("starting the node: %w", err)
	}
	a.node = node
	a.dom.Attach(node)
	return nil
}

// startAPI serves the admin API and the Master service on --grpc-addr.
func (a *agent) startAPI(stdout io.Writer) error {
	cfg := a.cfg
	lis, err := net.Listen("tcp", listenOn(cfg.ListenHost, cfg.GRPCAddr))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if a.srv, err = admin.New(admin.WithDomain(admin.NodeBackend(a.node), a.dom), admin.Config{AdvertiseAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr, Logger: a.logger, Metrics: a.metrics,
		DialOptions: a.tlsc.dialTo(security.RoleMaster), Access: agentAccess(cfg, a.metrics, stdout), ClusterSecret: cfg.ClusterSecret, Snapshots: a.snapshotSchedule()}); err != nil {
		return err
	}
	gopts, err := a.grpcOptions()
	if err != nil {
		return err
	}
	a.gs = grpc.NewServer(gopts...)
	a.srv.RegisterServices(a.gs)
	domain.RegisterMasterService(a.gs, a.dom, admin.Unavailable, a.srv.RegionServerGrants, a.srv.RegionServerRefusals)
	if err := a.srv.Start(cfg.GRPCAddr); err != nil {
		return err
	}
	a.apiStarted = true
	go func() {
		a.serveErr <- a.gs.Serve(security.Limit(lis, cfg.ConnLimits, "grpc", a.listenerMetrics, a.logger))
	}()
	return nil
}

// snapshotSchedule is the admin server's scheduled snapshots, with their
// metrics in the agent's registry; nil when off.
func (a *agent) snapshotSchedule() *admin.SnapshotSchedule {
	s := a.cfg.Snapshots.schedule()
	if s != nil {
		s.Metrics = a.metrics
	}
	return s
}

// agentAccess is the admin API's access control and audit trail, as the
// flags set them.
func agentAccess(cfg agentConfig, metrics *prometheus.Registry, stdout io.Writer) *admin.Access {
	return &admin.Access{Enforce: cfg.ACL, ClientAuth: cfg.ClientAuth, InitialGrants: cfg.ACLInitialGrants, BootstrapTokenTTL: cfg.ACLBootstrapTokenTTL, BootstrapToken: cfg.ACLBootstrapToken, AuditRetention: cfg.AuditRetention,
		AuditMaxRecords: cfg.AuditMaxRecords, AuditMaxPerPrincipal: cfg.AuditMaxPerPrincipal, AuditMaxRefusedPerCaller: cfg.AuditMaxRefusedPerCaller,
		AuditFile: cfg.AuditFile, Metrics: metrics, ChangeLimit: admin.RateLimit{Rate: cfg.ChangeRate, Burst: cfg.ChangeBurst},
		OnBootstrap: func(token string) {
			fmt.Fprintf(stdout, "bootstrap token (permission admin; shown this once, keep it safe):\n  %s\n", token)
		}}
}

// grpcOptions are the gRPC server's options: one server carries the admin
// API and the Master service the region servers call (registration,
// heartbeats, reports), behind the same chain of interceptors.
func (a *agent) grpcOptions() ([]grpc.ServerOption, error) {
	cfg := a.cfg
	tlsOpts, err := a.tlsc.serverOptions(security.MasterPolicyFor(cfg.ClientAuth, admin.MasterOnlyMethods()...), a.metrics)
	if err != nil {
		return nil, err
	}
	// Refusals first: it records those of every interceptor after it, the
	// identity policy's included, on every service of the port.
	gopts := append(cfg.ConnLimits.GRPCServerOptions(),
		grpc.ChainUnaryInterceptor(a.srv.RefusalInterceptor()), grpc.ChainStreamInterceptor(a.srv.RefusalStreamInterceptor()))
	gopts = append(gopts, tlsOpts...)
	// Access control after the identity policy, and before the rate
	// limit: a caller either refuses spends no tokens (and the audit
	// trail records a call the limit refused).
	gopts = append(gopts, grpc.ChainUnaryInterceptor(a.srv.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.srv.StreamInterceptor()))
	gopts = append(gopts, admin.RequestLimits()...)
	limit, err := admin.RateLimitInterceptor(admin.RateLimit{Rate: cfg.SubmitRate, Burst: cfg.SubmitBurst}, a.metrics)
	if err != nil {
		return nil, err
	}
	if limit != nil {
		gopts = append(gopts, grpc.ChainUnaryInterceptor(limit))
	}
	return gopts, nil
}

// startHTTP serves the console, /status, /readyz, /metrics (and the debug
// endpoints) on --http-addr, if given.
func (a *agent) startHTTP() error {
	cfg := a.cfg
	if cfg.HTTPAddr == "" {
		return nil
	}
	hl, err := net.Listen("tcp", cfg.HTTPAddr)
	if err == nil {
		// The console is a client of this node's admin API, as any
		// other: a standby's shows the leader's state.
		// It answers to the names of the node's own addresses (and
		// IP addresses, localhost): a compose service's name, when
		// that is how the node is configured.
		var con *console.Console
		con, err = console.New(console.Config{AdminAddr: cfg.GRPCAddr, Logger: a.logger,
			AllowedHosts: agentHostNames(cfg), DialOptions: consoleDialOptions(a.tlsc, cfg.ClusterSecret, cfg.GRPCAddr), TLS: a.tlsc.creds != nil})
		if err != nil {
			_ = hl.Close()
		} else {
			a.con = con // closed with the process (close)
		}
	}
	if err != nil {
		return fmt.Errorf("HTTP: %w", err)
	}
	httpOpts := append(debugOptions(cfg), admin.WithLastSnapshot(a.srv.LastSnapshot))
	handler, err := agentHTTPHandler(cfg, a.srv, console.Mount(admin.HTTPHandler(admin.WithDomain(admin.NodeBackend(a.node), a.dom), a.metrics, httpOpts...), a.con), a.logger)
	if err != nil {
		_ = hl.Close()
		return fmt.Errorf("HTTP: %w", err)
	}
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: httpHeaderTimeout(cfg.ConnLimits)}
	hl = a.tlsc.listener(security.Limit(hl, cfg.ConnLimits, "http", a.listenerMetrics, a.logger), security.RoleClient, security.RoleMaster)
	go func() {
		if err := httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.serveErr <- fmt.Errorf("HTTP: %w", err)
		}
	}()
	a.httpSrv = httpSrv
	return nil
}

// abort stops, at once, what started before a later part failed to.
func (a *agent) abort() {
	if a.apiStarted {
		a.srv.Stop(context.Background())
		a.gs.Stop()
	}
	if a.httpSrv != nil {
		_ = a.httpSrv.Close()
	}
	_ = a.node.Shutdown(context.Background())
}

// printBanner says where the node listens and how it runs.
func (a *agent) printBanner(stdout io.Writer) {
	cfg, tlsc, rss := a.cfg, a.tlsc, a.rss
	fmt.Fprintf(stdout, "baton node %q running\n  admin API (gRPC): %s\n  raft:             %s\n", cfg.ID, cfg.GRPCAddr, cfg.RaftAddr)
	if cfg.ListenHost != "" {
		fmt.Fprintf(stdout, "  listening on:     %s (admin API), %s (raft) (--listen-host)\n", listenOn(cfg.ListenHost, cfg.GRPCAddr), listenOn(cfg.ListenHost, cfg.RaftAddr))
	}
	if cfg.InitialClusterSize > 0 {
		fmt.Fprintf(stdout, "  members:          %s (--initial-cluster-size %d)\n", derivedMembersLine(cfg), cfg.InitialClusterSize)
	}
	if cfg.HTTPAddr != "" {
		scheme := tlsc.scheme()
		fmt.Fprintf(stdout, "  console:          %s://%s/\n  status:           %s://%s/status\n  metrics:          %s://%s/metrics\n", scheme, cfg.HTTPAddr, scheme, cfg.HTTPAddr, scheme, cfg.HTTPAddr)
	}
	if cfg.HTTPAddr != "" && cfg.DebugEndpoints {
		fmt.Fprintf(stdout, "  debug:            %s://%s/debug/pprof/ and /debug/domain (--debug-endpoints)\n", tlsc.scheme(), cfg.HTTPAddr)
	}
	if tlsc.creds != nil {
		fmt.Fprintf(stdout, "  TLS:              mutual, as %s (certificate until %s)\n", tlsc.creds.Identity(), tlsc.creds.NotAfter().UTC().Format(time.RFC3339))
		fmt.Fprintf(stdout, "  clients:          %s\n", clientAuthBanner(cfg.ClientAuth))
	}
	switch {
	case cfg.ACL && cfg.ACLBootstrapToken != "":
		fmt.Fprintf(stdout, "  access control:   on (baton acl list; the bootstrap token is the one of --acl-bootstrap-token-file)\n")
	case cfg.ACL:
		fmt.Fprintf(stdout, "  access control:   on (baton acl list; the cluster's first leader prints a bootstrap token once)\n")
	default:
		fmt.Fprintf(stdout, "  access control:   off: every caller may call everything (--acl on to enforce)\n")
	}
	if a.tracing.tp != nil {
		fmt.Fprintf(stdout, "  traces:           OTLP (%s), from the OTEL_* environment\n", a.tracing.protocol)
	}
	fmt.Fprintf(stdout, "  data:             %s\n", cfg.DataDir)
	if cfg.Dev {
		if len(rss) == 0 {
			fmt.Fprintf(stdout, "  region servers:   none (--dev-regionservers 0): tables cannot be created until one runs ('baton regionserver --masters %s ...')\n", cfg.GRPCAddr)
		} else {
			fmt.Fprintf(stdout, "  region servers:   %d in this process, registering with this master:\n", len(rss))
			for _, rs := range rss {
				fmt.Fprintf(stdout, "                    %s at %s (metrics http://%s/metrics)\n", rs.ID(), rs.Addr(), rs.HTTPAddr())
			}
		}
	}
	fmt.Fprintf(stdout, "try: baton proc submit sleep --addr %s --wait\n", cfg.GRPCAddr)
	if len(rss) > 0 {
		fmt.Fprintf(stdout, "     baton table create t1 --regions 4 --wait --addr %s\n", cfg.GRPCAddr)
	}
}

// shutdown stops the agent gracefully, within shutdownTimeout.
func (a *agent) shutdown() {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	a.logger.Info("shutting down: leadership transfer, then stop")
	// The dev region servers go first: they are this process's, and would
	// otherwise spend the shutdown looking for a master.
	for _, rs := range a.rss {
		if err := rs.Stop(sctx); err != nil {
			a.logger.Warn("dev region server stop", "id", rs.ID(), "error", err)
		}
	}
	// Raft first: a leader hands over while its admin API still answers
	// forwarded calls; then the API and HTTP go.
	if err := a.node.Shutdown(sctx); err != nil {
		a.logger.Warn("node shutdown", "error", err)
	}
	a.srv.Stop(sctx)
	grpcstop.Stop(sctx, a.gs)
	if a.httpSrv != nil {
		_ = a.httpSrv.Shutdown(sctx)
	}
	a.tracing.flush(sctx)
}

// agentHTTPHandler puts every path of the HTTP port behind the check of
// the Host header (DNS rebinding), then access control: a request by a
// name the node does not answer to is refused before anything else is
// said to it.
func agentHTTPHandler(cfg agentConfig, srv *admin.Server, mux http.Handler, logger hclog.Logger) (http.Handler, error) {
	hosts, err := security.NewHostCheck(logger.Named("http"), agentHostNames(cfg)...)
	if err != nil {
		return nil, err
	}
	return hosts.Wrap(certOrProbe(cfg.ClientAuth, srv.Authorizer(mux)), "'baton agent --http-allowed-hosts NAME'"), nil
}

// agentHostNames are the names the node's HTTP port answers to, the
// console's as every other path's: its own addresses and
// --http-allowed-hosts.
func agentHostNames(cfg agentConfig) []string {
	return append([]string{cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr}, cfg.HTTPAllowedHosts...)
}

func debugOptions(cfg agentConfig) []admin.HTTPOption {
	if !cfg.DebugEndpoints {
		return nil
	}
	return []admin.HTTPOption{admin.WithDebugEndpoints()}
}

// httpHeaderTimeout is an HTTP server's ReadHeaderTimeout, which also
// bounds its TLS handshake: 5 s, or the handshake bound if shorter.
func httpHeaderTimeout(l security.ConnLimits) time.Duration {
	return min(5*time.Second, l.WithDefaults().HandshakeTimeout)
}

// startDevRegionServers starts the simulated region servers of a --dev
// agent in this process. They register with this master through its admin
// address, as real ones do, each on a free loopback port, and serve their
// /metrics and /readyz on another.
func startDevRegionServers(ctx context.Context, cfg agentConfig, logger hclog.Logger, tracing *tracing) ([]*regionserver.Server, error) {
	if !cfg.Dev {
		return nil, nil
	}
	var rss []*regionserver.Server
	stopAll := func() {
		sctx, cancel := context.WithTimeout(context.Background(), regionServerStopTimeout)
		defer cancel()
		for _, rs := range rss {
			_ = rs.Stop(sctx)
		}
	}
	for i := 1; i <= cfg.DevRegionServers; i++ {
		id := fmt.Sprintf("rs%d", i)
		rs, err := regionserver.New(regionserver.Config{
			ID: id, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Masters: []string{cfg.GRPCAddr}, ConnLimits: cfg.ConnLimits,
			Logger: logger.ResetNamed("baton.rs." + id), TracerProvider: tracing.provider(),
			// They are this binary: they register with what it says it is,
			// as the agent's node reports it (a release build's version,
			// a test build's format stamp), not the library's default.
			Build: semver.Current(readBuildInfo().Version),
		})
		if err == nil {
			err = rs.Start(ctx)
		}
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("dev region server %s: %w", id, err)
		}
		rss = append(rss, rs)
	}
	return rss, nil
}

// joinCluster asks the cluster reachable at cfg.Join to add this node,
// retrying until it is added or ctx ends. A node that is already a member
// is accepted again (the leader removes a stale entry first). empty says
// the node started with no Raft state (cluster.Node.StartedEmpty): not
// every join does, as a later StatefulSet member (--initial-cluster-size)
// or a --join in a unit file asks on every start. Said, it has a leader
// that still lists it as a voter demote it to a non-voter while it holds
// nothing (cluster.Node.JoinEmpty).
func joinCluster(ctx context.Context, cfg agentConfig, empty bool, tlsc *agentTLS, logger hclog.Logger) {
	c, err := client.New(cfg.Join, client.WithDialOptions(tlsc.dialTo(security.RoleMaster)...))
	if err != nil {
		logger.Error("join: bad --join addresses", "error", err)
		return
	}
	defer c.Close()
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.AddPeerRequest(cctx, &adminpb.AddPeerRequest{Id: cfg.ID, RaftAddress: cfg.RaftAddr, AdminAddress: cfg.GRPCAddr, HoldsNoState: empty})
		cancel()
		if err == nil {
			logger.Info("joined the cluster", "via", cfg.Join)
			return
		}
		logger.Warn("join failed; retrying", "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
