package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/security"
)

// Defaults of `baton agent --dev`: a single node on loopback.
const (
	devID       = "dev"
	devDataDir  = "./baton-data"
	devGRPCAddr = "127.0.0.1:7070"
	devRaftAddr = "127.0.0.1:7071"
	devHTTPAddr = "127.0.0.1:7072"
	// devRegionServers is how many simulated region servers --dev runs
	// in-process, so that tables can be created against it at once.
	devRegionServers = 3
)

// maxAgentWorkers bounds --workers: each is a goroutine, and past a few
// thousand the pool only adds scheduling cost.
const maxAgentWorkers = 4096

// agentConfig is the validated command line of `baton agent`.
type agentConfig struct {
	ID       string         // Raft server id, stable across restarts
	DataDir  string         // the node's durable state
	RaftAddr string         // Raft transport bind and advertised address
	GRPCAddr string         // admin API bind and advertised address
	HTTPAddr string         // the web console, /status, /readyz, /metrics, /debug/pprof; "" disables
	Peers    []cluster.Peer // static bootstrap configuration (first start only)
	Join     []string       // admin addresses of members to join through
	// InitialClusterSize, if set, is how many masters the cluster starts
	// with, Peers or Join derived from it and the StatefulSet names of ID,
	// RaftAddr and GRPCAddr (nodeFlags.deriveMembers).
	InitialClusterSize int
	// DerivedAdmin, with InitialClusterSize and an ordinal below it, is
	// the other initial members' admin addresses: asked before a first
	// bootstrap whether their cluster runs already (bootstrapGuard), and
	// joined through if it does.
	DerivedAdmin []string
	// ListenHost, if set, is the host the Raft transport and the admin
	// API listen on, with the ports of RaftAddr and GRPCAddr, which are
	// still advertised as given (listenOn).
	ListenHost string
	Dev        bool // single-node cluster with loopback defaults
	// DevRegionServers is how many simulated region servers a --dev agent
	// runs in its own process (0: none).
	DevRegionServers int
	// HTTPAllowedHosts are names the web console answers to besides IP
	// addresses, localhost and the hosts of --http-addr and --grpc-addr
	// (console.Config.AllowedHosts), normalized by console.HostName.
	HTTPAllowedHosts []string
	// Workers is the size of the leader's executor pool (0: the default,
	// cluster.DefaultWorkers).
	Workers int
	// TLS is the node's TLS material: mutual TLS on Raft, gRPC and HTTP
	// when set (security.Files.Enabled).
	TLS security.Files
	// TLSFrom says where each of TLS's files was named, for messages.
	TLSFrom tlsSources
	// Insecure allows plaintext on addresses other than loopback.
	Insecure bool
	// SubmitRate and SubmitBurst limit how fast each caller may start
	// procedures through this node (admin.RateLimit; 0: no limit).
	SubmitRate  float64
	SubmitBurst int
	// ChangeRate and ChangeBurst limit how fast each caller may make
	// state-changing calls and be refused (admin.Access.ChangeLimit; 0:
	// no limit).
	ChangeRate  float64
	ChangeBurst int
	// ACL: enforce access control (admin.Access.Enforce); on by default
	// with TLS, off without.
	ACL bool
	// ClientAuth is how clients are authenticated (--client-auth:
	// admin.Access.ClientAuth); cert by default.
	ClientAuth security.ClientAuth
	// ACLInitialGrants are bound at each leadership when unbound
	// (admin.Access.InitialGrants).
	ACLInitialGrants map[string]security.Permission
	// ACLBootstrapTokenTTL is how long the bootstrap token lasts (0:
	// until deleted; admin.Access.BootstrapTokenTTL).
	ACLBootstrapTokenTTL time.Duration
	// ACLBootstrapToken is the bootstrap token read from
	// --acl-bootstrap-token-file ("": the first leader makes one;
	// admin.Access.BootstrapToken).
	ACLBootstrapToken string
	// AuditRetention and AuditMaxRecords bound the audit trail (0: the
	// defaults of admin.Access).
	AuditRetention  time.Duration
	AuditMaxRecords int
	// AuditMaxPerPrincipal and AuditMaxRefusedPerCaller are the trail's
	// quotas (admin.Access).
	AuditMaxPerPrincipal     int
	AuditMaxRefusedPerCaller int
	// AuditFile, if set, is where this master exports the trail.
	AuditFile *admin.AuditExport
	// Raft holds the Raft timeouts given (zero: cluster's defaults).
	Raft raftTimings
	// Snapshots are the scheduled snapshots (zero: none).
	Snapshots snapshotSchedule
	// RaftLog holds the Raft log's compaction counts given (zero:
	// cluster's defaults).
	RaftLog raftLog
	// Autopilot holds the autopilot flags given (zero: cluster's
	// defaults).
	Autopilot autopilotSettings
	// DebugEndpoints serves /debug/domain and /debug/pprof/ on the HTTP
	// port (admin.WithDebugEndpoints); off by default.
	DebugEndpoints bool
	// ConnLimits bound the connections of every port (zero: the
	// defaults of security.ConnLimits).
	ConnLimits security.ConnLimits
	// ClusterSecret is, in a plaintext cluster, what proves a master to
	// another (admin.Config.ClusterSecret); "" none.
	ClusterSecret string
	// RecoverQuorum makes this start turn the node into a one-member
	// cluster (cluster.Config.RecoverQuorum) once Yes confirms it; without
	// Yes the agent prints the plan and exits. Command line only: a flag
	// left in a config file or the environment would recover again at
	// the next restart and drop the members that joined since.
	RecoverQuorum, Yes bool
}

// agentEnv maps each agent flag to its environment variable.
var agentEnv = map[string]string{
	"id":        "BATON_ID",
	"data-dir":  "BATON_DATA_DIR",
	"raft-addr": "BATON_RAFT_ADDR",
	"grpc-addr": "BATON_GRPC_ADDR",
	"http-addr": "BATON_HTTP_ADDR",
	"peers":     "BATON_PEERS",
	"join":      "BATON_JOIN",
	"dev":       "BATON_DEV",

	"initial-cluster-size": "BATON_INITIAL_CLUSTER_SIZE",
	"listen-host":          "BATON_LISTEN_HOST",

	"dev-regionservers": "BATON_DEV_REGIONSERVERS",

	"http-allowed-hosts": "BATON_HTTP_ALLOWED_HOSTS",
	"debug-endpoints":    "BATON_DEBUG_ENDPOINTS",

	"handshake-timeout":    "BATON_HANDSHAKE_TIMEOUT",
	"max-conns-per-source": "BATON_MAX_CONNS_PER_SOURCE",

	"workers": "BATON_WORKERS",

	"tls-ca":   agentTLSEnv.CA,
	"tls-cert": agentTLSEnv.Cert,
	"tls-key":  agentTLSEnv.Key,
	"insecure": "BATON_INSECURE",

	"submit-rate":  "BATON_SUBMIT_RATE",
	"submit-burst": "BATON_SUBMIT_BURST",
	"change-rate":  "BATON_CHANGE_RATE",
	"change-burst": "BATON_CHANGE_BURST",

	"acl":                "BATON_ACL",
	"client-auth":        "BATON_CLIENT_AUTH",
	"acl-initial-grants": "BATON_ACL_INITIAL_GRANTS",
	"audit-retention":    "BATON_AUDIT_RETENTION",
	"audit-max-records":  "BATON_AUDIT_MAX_RECORDS",

	"audit-max-per-principal":      "BATON_AUDIT_MAX_PER_PRINCIPAL",
	"audit-max-refused-per-caller": "BATON_AUDIT_MAX_REFUSED_PER_CALLER",
	"audit-file":                   "BATON_AUDIT_FILE",
	"audit-file-max-size":          "BATON_AUDIT_FILE_MAX_SIZE",
	"audit-file-keep":              "BATON_AUDIT_FILE_KEEP",

	"acl-bootstrap-token-ttl":  "BATON_ACL_BOOTSTRAP_TOKEN_TTL",
	"acl-bootstrap-token-file": "BATON_ACL_BOOTSTRAP_TOKEN_FILE",

	"cluster-secret":      "BATON_CLUSTER_SECRET",
	"cluster-secret-file": "BATON_CLUSTER_SECRET_FILE",
}

// agentFlagGroupsEnv are the environment variables of the flag groups
// kept in files of their own; agentEnv takes them in, and the config file
// reads them through it.
var agentFlagGroupsEnv = []map[string]string{raftTimingEnv, raftLogEnv, autopilotEnv, snapshotEnv}

func init() {
	for _, m := range agentFlagGroupsEnv {
		maps.Copy(agentEnv, m)
	}
}

// parseAgentFlags reads `baton agent` flags, each defaulting to its
// environment variable (flags win), and validates the result. Flag syntax
// errors are reported by the flag package on stderr and returned as is;
// invalid values come back as a *usageError naming every problem.
func parseAgentFlags(args []string, getenv func(string) string, stdout, stderr io.Writer) (agentConfig, error) {
	fs, rawEnv, getenv, err := serverFlagSet("baton agent", args, getenv, agentEnv, stdout, stderr)
	if err != nil {
		return agentConfig{}, err
	}
	f, envErr := addAgentFlags(fs, getenv)
	pos, err := parse(fs, args)
	if err != nil {
		return agentConfig{}, err
	}
	if envErr != nil {
		return agentConfig{}, envErr
	}
	cfg := f.node.config()
	cfg.Dev, cfg.Insecure = *f.dev, *f.insecure
	cfg.TLS = f.tls.files()
	cfg.TLSFrom = serverTLSSources(fs, agentTLSEnv, rawEnv, args, "BATON_CONFIG")
	if !cfg.Dev && !cfg.TLS.Enabled() {
		warn := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
		if f, src, ok := legacyServerTLS("agent", security.RoleMaster, agentTLSEnv, rawEnv, warn); ok {
			cfg.TLS, cfg.TLSFrom = f, src
		}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(pos) > 0 {
		bad("takes no arguments, got %q", pos)
	}
	f.check(fs, &cfg, bad)
	if len(problems) > 0 {
		return cfg, &usageError{strings.Join(problems, "\n  ")}
	}
	return cfg, nil
}

// agentFlags are the values of `baton agent`'s flags as given, before
// they are checked, by concern.
type agentFlags struct {
	node   nodeFlags
	tls    tlsFileFlags
	limits rateLimitFlags
	access accessFlags
	audit  auditFlags
	secret clusterSecretFlags
	raft   raftTimingFlags
	log    raftLogFlags
	conn   connLimitFlags
	snap   snapshotFlags
	auto   autopilotFlags

	workers, devRS                *string
	dev, insecure, debugEndpoints *bool
	recoverQuorum, yes            *bool
}

// addAgentFlags defines every flag of `baton agent` on fs, each defaulting
// to its environment variable through getenv. The error is a boolean
// variable that does not parse, for the caller to report once the command
// line parsed (-h still works).
func addAgentFlags(fs *flag.FlagSet, getenv func(string) string) (agentFlags, error) {
	str := func(name, usage string) *string {
		return fs.String(name, getenv(agentEnv[name]), usage+" (env "+agentEnv[name]+")")
	}
	var f agentFlags
	f.node = addNodeFlags(str)
	f.workers = str("workers", fmt.Sprintf("executor workers on the leader, 1..%d: a step holds its worker until its write commits, so the pool caps the steps one Raft write carries (default %d)", maxAgentWorkers, cluster.DefaultWorkers))
	f.limits = addRateLimitFlags(str)
	f.tls = addTLSFileFlags(str)
	f.access = addAccessFlags(str)
	f.audit = addAuditFlags(str)
	f.secret = addClusterSecretFlags(str)
	f.raft = addRaftTimingFlags(str)
	f.log = addRaftLogFlags(str)
	f.conn = addConnLimitFlags(str)
	f.snap = addSnapshotFlags(str)
	f.auto = addAutopilotFlags(str)
	var envErr error
	boolEnv := func(name string) bool {
		v := getenv(agentEnv[name])
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil && envErr == nil {
			envErr = usagef("%s (or --config's %q) = %q: want true or false", agentEnv[name], name, v)
		}
		return b
	}
	f.dev = fs.Bool("dev", boolEnv("dev"), "single-node development cluster with loopback defaults (env "+agentEnv["dev"]+")")
	f.insecure = fs.Bool("insecure", boolEnv("insecure"), "allow plaintext on addresses other than loopback: anyone who reaches them can join, call the admin API or speak Raft (env "+agentEnv["insecure"]+")")
	f.debugEndpoints = fs.Bool("debug-endpoints", boolEnv("debug-endpoints"), "serve /debug/pprof/ (profiles) and /debug/domain (the whole replicated state) on --http-addr, "+
		"to admin permission under access control; off by default (env "+agentEnv["debug-endpoints"]+")")
	// No environment variable and no config-file key (agentEnv): a
	// one-shot operator action, never part of how the agent starts.
	f.recoverQuorum = fs.Bool("recover-quorum", false, "once, after a majority of the masters are lost for good (their disks gone): make this node, from its own data, "+
		"the only member of the cluster, then run as usual; prints what may be lost and does it only with --yes (exit codes below; docs/operations.md, Quorum lost for good)")
	f.yes = fs.Bool("yes", false, "with --recover-quorum: do it; without --yes the plan is printed and nothing is done (exit 2)")
	f.devRS = str("dev-regionservers", fmt.Sprintf("with --dev, how many simulated region servers (rs1, rs2, ...) run in this process, on free loopback ports; 0: none (default %d)", devRegionServers))
	fs.Usage = func() { agentUsage(fs) }
	return f, envErr
}

// agentUsage prints `baton agent -h`.
func agentUsage(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), "usage: baton agent [--dev [--dev-regionservers N]] [flags]\n\n"+
		"--dev runs a single-node cluster on loopback with %d simulated region servers\n"+
		"in the same process, so that every client command works against it.\n\n"+
		"--recover-quorum (with the node's usual flags, its own agent stopped) makes a\n"+
		"survivor of a lost quorum the only member, then serves. Exit codes:\n"+
		"  0  stopped by SIGINT or SIGTERM after serving\n"+
		"  1  failed to start or run; with --recover-quorum also: refused (no raft state\n"+
		"     in --data-dir, already the only voter, not a member, or a quorum of the\n"+
		"     members still answers), nothing changed\n"+
		"  2  bad flags; with --recover-quorum but without --yes: the plan was printed,\n"+
		"     nothing changed\n\nflags:\n", devRegionServers)
	printDefaults(fs, map[string]string{"workers": "int", "submit-rate": "float", "submit-burst": "int", "change-rate": "float", "change-burst": "int", "audit-retention": "duration", "acl-bootstrap-token-ttl": "duration",
		"audit-max-records": "int", "dev-regionservers": "int", "acl": "on|off", "audit-max-per-principal": "int", "audit-max-refused-per-caller": "int",
		"audit-file": "path", "audit-file-max-size": "MiB", "audit-file-keep": "int", "handshake-timeout": "duration", "max-conns-per-source": "int",
		"snapshot-interval": "duration", "snapshot-dir": "path", "snapshot-retain": "int",
		"raft-snapshot-threshold": "int", "raft-trailing-logs": "int", "raft-snapshot-interval": "duration",
		"server-stabilization-time": "duration", "dead-member-timeout": "duration", "min-quorum": "int", "initial-cluster-size": "int", "listen-host": "host"})
}

// check fills cfg from the flags past the node's addresses and TLS files
// (already in cfg), naming every problem through bad, in the order the
// usage error lists them.
func (f agentFlags) check(fs *flag.FlagSet, cfg *agentConfig, bad func(string, ...any)) {
	f.limits.parse(cfg, bad)
	f.access.parse(cfg, bad)
	f.audit.parse(cfg, bad)
	cfg.ClusterSecret = f.secret.parse(cfg.TLS.Enabled(), bad)
	cfg.Raft = f.raft.parse(bad)
	cfg.RaftLog = f.log.parse(bad)
	cfg.ConnLimits = f.conn.parse(bad)
	cfg.Snapshots = f.snap.parse(bad)
	cfg.Autopilot = f.auto.parse(bad)
	cfg.DebugEndpoints = *f.debugEndpoints
	cfg.RecoverQuorum, cfg.Yes = *f.recoverQuorum, *f.yes
	switch {
	case cfg.Yes && !cfg.RecoverQuorum:
		bad("--yes confirms --recover-quorum, which is not given")
	case cfg.RecoverQuorum && cfg.Dev:
		bad("--recover-quorum is for a member of a cluster that lost its quorum, not --dev's single node")
	case cfg.RecoverQuorum && *f.node.join != "":
		bad("--recover-quorum makes this node a cluster of its own: drop --join (new members join it afterwards)")
	}
	if n, ok := intFlag("workers", *f.workers, "a number of executor workers", 1, maxAgentWorkers, bad); ok {
		cfg.Workers = n
	}
	cfg.HTTPAllowedHosts = f.node.allowedHosts(bad)
	cfg.ListenHost = parseListenHost(*f.node.listenHost, bad)
	if cfg.Dev {
		f.devDefaults(cfg, bad)
	} else {
		f.nodeRequired(fs, cfg, bad)
	}
	checkAgentAddrs(cfg, bad)
	if !cfg.Dev {
		f.node.members(cfg, bad)
	}
}

// devDefaults fills what --dev leaves out with its loopback defaults.
func (f agentFlags) devDefaults(cfg *agentConfig, bad func(string, ...any)) {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&cfg.ID, devID)
	def(&cfg.DataDir, devDataDir)
	def(&cfg.RaftAddr, devRaftAddr)
	def(&cfg.GRPCAddr, devGRPCAddr)
	def(&cfg.HTTPAddr, devHTTPAddr)
	if *f.node.peers != "" || *f.node.join != "" {
		bad("--dev runs a single-node cluster: drop --peers and --join, or drop --dev")
	}
	if *f.node.initialSize != "" {
		bad("--dev runs a single-node cluster: drop --initial-cluster-size, or drop --dev")
	}
	cfg.Peers = []cluster.Peer{{ID: cfg.ID, Address: cfg.RaftAddr}}
	cfg.DevRegionServers = devRegionServers
	if n, ok := intFlag("dev-regionservers", *f.devRS, "a number of region servers", 0, 100, bad); ok {
		cfg.DevRegionServers = n
	}
}

// nodeRequired checks that a node of a real cluster was told who and
// where it is.
func (f agentFlags) nodeRequired(fs *flag.FlagSet, cfg *agentConfig, bad func(string, ...any)) {
	if flagSet(fs, "dev-regionservers") {
		bad("--dev-regionservers is for --dev only: run region servers with 'baton regionserver'")
	}
	if cfg.ID == "" {
		bad("--id is required (or --dev for a single-node cluster)")
	}
	if cfg.DataDir == "" {
		bad("--data-dir is required")
	}
	if cfg.RaftAddr == "" {
		bad("--raft-addr is required")
	}
	if cfg.GRPCAddr == "" {
		bad("--grpc-addr is required")
	}
	if *f.node.peers != "" && *f.node.join != "" {
		bad("give --peers (a new cluster's members) or --join (add this node to a running cluster), not both")
	}
}

// checkAgentAddrs checks the node's addresses: each well formed, TLS
// where they leave the machine, each port its own.
func checkAgentAddrs(cfg *agentConfig, bad func(string, ...any)) {
	for _, a := range []struct {
		flag, v    string
		wildcardOK bool // only bound, never advertised
	}{
		{"--raft-addr", cfg.RaftAddr, false},
		{"--grpc-addr", cfg.GRPCAddr, false},
		{"--http-addr", cfg.HTTPAddr, true},
	} {
		if a.v == "" {
			continue
		}
		if err := checkAddr(a.flag, a.v, a.wildcardOK); err != nil {
			bad("%v", err)
		}
	}
	if err := validateTLS(cfg.TLS, cfg.TLSFrom, agentTLSEnv); err != nil {
		bad("%v", err)
	}
	if cfg.Dev && cfg.TLS.Enabled() {
		var from []string
		for i, v := range filesList(cfg.TLS) {
			if v != "" {
				from = append(from, cfg.TLSFrom.list()[i])
			}
		}
		bad("--dev runs plaintext on loopback: drop the TLS files (given by %s), or drop --dev", strings.Join(from, ", "))
	}
	if !cfg.TLS.Enabled() && !cfg.Insecure {
		var open []string
		for _, a := range [][2]string{{"--raft-addr", cfg.RaftAddr}, {"--grpc-addr", cfg.GRPCAddr}, {"--http-addr", cfg.HTTPAddr}} {
			if a[1] != "" && !isLoopbackAddr(a[1]) {
				open = append(open, a[0]+" "+a[1])
			}
		}
		if cfg.ListenHost != "" && !isLoopbackAddr(net.JoinHostPort(cfg.ListenHost, "1")) {
			open = append(open, "--listen-host "+cfg.ListenHost)
		}
		if len(open) > 0 {
			bad("%s: not loopback, and without TLS anyone who reaches it can join the cluster, call the admin API or speak Raft; give --tls-ca, --tls-cert and --tls-key, or --insecure to run plaintext anyway",
				strings.Join(open, ", "))
		}
	}
	seen := map[string]string{}
	for _, a := range [][2]string{{"--raft-addr", cfg.RaftAddr}, {"--grpc-addr", cfg.GRPCAddr}, {"--http-addr", cfg.HTTPAddr}} {
		if a[1] == "" {
			continue
		}
		if other, dup := seen[a[1]]; dup {
			bad("%s and %s are both %s: each needs its own port", other, a[0], a[1])
		}
		seen[a[1]] = a[0]
	}
	if cfg.ListenHost != "" {
		// On one host, the ports alone must differ (the same address
		// twice is said above).
		ports := map[string][2]string{}
		for _, a := range [][2]string{{"--raft-addr", cfg.RaftAddr}, {"--grpc-addr", cfg.GRPCAddr}, {"--http-addr", cfg.HTTPAddr}} {
			_, port, err := net.SplitHostPort(a[1])
			if err != nil {
				continue
			}
			if other, dup := ports[port]; dup && other[1] != a[1] {
				bad("--listen-host %s: %s and %s both have port %s: each needs its own port", cfg.ListenHost, other[0], a[0], port)
			}
			ports[port] = a
		}
	}
}

// nodeFlags name the node and where it listens, and the cluster it
// bootstraps or joins.
type nodeFlags struct {
	id, dataDir, raftAddr, grpcAddr, httpAddr, hosts, peers, join *string
	initialSize, listenHost                                       *string
}

func addNodeFlags(str func(name, usage string) *string) nodeFlags {
	return nodeFlags{
		id:       str("id", "this node's id, unique in the cluster and stable across restarts"),
		dataDir:  str("data-dir", "directory of the node's durable state (--dev: "+devDataDir+")"),
		raftAddr: str("raft-addr", "host:port of the Raft transport, reachable by the other nodes (--dev: "+devRaftAddr+")"),
		grpcAddr: str("grpc-addr", "host:port of the admin API, reachable by clients and the other nodes (--dev: "+devGRPCAddr+")"),
		httpAddr: str("http-addr", "host:port the web console (/), /status, /readyz, /metrics and /debug/pprof listen on (a listening address: 0.0.0.0 is fine, --listen-host does not change it); empty: none (--dev: "+devHTTPAddr+")"),
		hosts: str("http-allowed-hosts", "names,... the HTTP port (console, /status, /metrics, ...) answers to besides IP addresses, localhost and the hosts of --http-addr, --grpc-addr and --raft-addr "+
			"(a name your browser or scraper uses for this node: a DNS name, a load balancer's); other names are refused (403), against DNS rebinding"),
		peers: str("peers", "bootstrap members id=raft-host:port,...; identical on every node, used on first start only"),
		join:  str("join", "admin addresses host:port,... of members to join through, for a node added later"),
		initialSize: str("initial-cluster-size", "N: derive the members from StatefulSet names instead of --peers/--join. --id is NAME-ORDINAL (a pod's name) and the first DNS label of the hosts of --raft-addr and --grpc-addr is the id; "+
			"members NAME-0..NAME-(N-1) are at those hosts with their own names. ORDINAL < N: bootstrap with them (first start only, as --peers); ORDINAL >= N: join through them (as --join)"),
		listenHost: str("listen-host", listenHostUsage("--raft-addr and --grpc-addr")),
	}
}

// config is the node's identity and addresses as given.
func (f nodeFlags) config() agentConfig {
	return agentConfig{ID: *f.id, DataDir: *f.dataDir, RaftAddr: *f.raftAddr, GRPCAddr: *f.grpcAddr, HTTPAddr: *f.httpAddr}
}

// allowedHosts are --http-allowed-hosts, normalized.
func (f nodeFlags) allowedHosts(bad func(string, ...any)) []string {
	return parseAllowedHosts(*f.hosts, bad)
}

// parseAllowedHosts is --http-allowed-hosts (a master's or a region
// server's) normalized, each name bad reports left out.
func parseAllowedHosts(v string, bad func(string, ...any)) []string {
	var out []string
	for _, h := range strings.Split(v, ",") {
		if strings.TrimSpace(h) == "" {
			continue
		}
		name, err := security.HostName(h)
		if err != nil || name == "" {
			bad("--http-allowed-hosts: %q is not a host name (letters, digits, '-', '_' and '.')", strings.TrimSpace(h))
			continue
		}
		out = append(out, name)
	}
	return out
}

// members reads --peers and --join of a node of a real cluster, or
// derives them from --initial-cluster-size.
func (f nodeFlags) members(cfg *agentConfig, bad func(string, ...any)) {
	if *f.initialSize != "" {
		f.deriveMembers(cfg, bad)
		return
	}
	if *f.peers != "" {
		ps, err := cluster.ParsePeers(*f.peers)
		if err != nil {
			bad("--peers: %v", strings.TrimPrefix(err.Error(), "cluster: peers: "))
		} else {
			self := false
			for _, p := range ps {
				if p.ID == cfg.ID {
					self = true
					if cfg.RaftAddr != "" && p.Address != cfg.RaftAddr {
						bad("--peers lists %s at %s but --raft-addr is %s: they must match", p.ID, p.Address, cfg.RaftAddr)
					}
				}
			}
			if !self && cfg.ID != "" {
				bad("--peers does not list this node (%s=%s): give the same list to every node, this one included", cfg.ID, cfg.RaftAddr)
			}
			cfg.Peers = ps
		}
	}
	if *f.join != "" {
		for _, a := range strings.Split(*f.join, ",") {
			a = strings.TrimSpace(a)
			if err := checkAddr("--join", a, false); err != nil {
				bad("%v", err)
				continue
			}
			cfg.Join = append(cfg.Join, a)
		}
	}
}

// clusterSecretFlags give a plaintext cluster's shared secret.
type clusterSecretFlags struct{ inline, file *string }

func addClusterSecretFlags(str func(name, usage string) *string) clusterSecretFlags {
	return clusterSecretFlags{
		inline: str("cluster-secret", fmt.Sprintf("without TLS, a secret of at least %d characters given to every master of the cluster, by which a master believes another's word on the calls it forwards (for whom, from where, already rate-limited); "+
			"without it a plaintext master believes no such word. Prefer --cluster-secret-file or the environment to the command line, which others may see", security.MinClusterSecretLen)),
		file: str("cluster-secret-file", "file holding --cluster-secret (surrounding white space ignored)"),
	}
}

func (f clusterSecretFlags) parse(tls bool, bad func(string, ...any)) string {
	return parseClusterSecret(*f.inline, *f.file, tls, bad)
}

// parseClusterSecret is the cluster secret given inline or in a file (one
// of the two), checked.
func parseClusterSecret(inline, file string, tls bool, bad func(string, ...any)) string {
	inline, file = strings.TrimSpace(inline), strings.TrimSpace(file)
	secret, from := inline, "--cluster-secret"
	switch {
	case inline != "" && file != "":
		bad("give --cluster-secret or --cluster-secret-file, not both")
		return ""
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			bad("--cluster-secret-file: %v", err)
			return ""
		}
		secret, from = strings.TrimSpace(string(b)), "--cluster-secret-file "+file
	case inline == "":
		return ""
	}
	if tls {
		bad("%s is for clusters without TLS: with TLS a master proves itself by its certificate; drop the secret", from)
		return ""
	}
	if len(secret) < security.MinClusterSecretLen {
		bad("%s: %d characters; want at least %d (e.g. 'openssl rand -hex 32'), the same on every master", from, len(secret), security.MinClusterSecretLen)
		return ""
	}
	return secret
}

// checkAddr checks a host:port flag value. Advertised addresses
// (wildcardOK false) must name a host others can reach.
// isLoopbackAddr says host:port v can only be reached from this machine.
func isLoopbackAddr(v string) bool {
	host, _, err := net.SplitHostPort(v)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkAddr(flagName, v string, wildcardOK bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return usagef("%s %q: want host:port", flagName, v)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return usagef("%s %q: the port must be a number in 1..65535", flagName, v)
	}
	if !wildcardOK {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return usagef("%s %q: other nodes and clients connect to this address, so it must name this host (e.g. its IP), not a wildcard", flagName, v)
		}
	}
	return nil
}

// clientAuthBanner says, on the agent's start, how clients are known.
func clientAuthBanner(a security.ClientAuth) string {
	switch a {
	case security.ClientAuthEither:
		return "a client certificate or a token (--client-auth either)"
	case security.ClientAuthToken:
		return "a token only; a client certificate grants nothing (--client-auth token)"
	}
	return "a client certificate of the CA, on every connection (--client-auth cert)"
}
