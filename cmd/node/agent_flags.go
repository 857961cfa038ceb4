package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/console"
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
	Dev      bool           // single-node cluster with loopback defaults
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
	// DebugEndpoints serves /debug/domain and /debug/pprof/ on the HTTP
	// port (admin.WithDebugEndpoints); off by default.
	DebugEndpoints bool
	// ConnLimits bound the connections of every port (zero: the
	// defaults of security.ConnLimits).
	ConnLimits security.ConnLimits
	// ClusterSecret is, in a plaintext cluster, what proves a master to
	// another (admin.Config.ClusterSecret); "" none.
	ClusterSecret string
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

	"acl-bootstrap-token-ttl": "BATON_ACL_BOOTSTRAP_TOKEN_TTL",

	"cluster-secret":      "BATON_CLUSTER_SECRET",
	"cluster-secret-file": "BATON_CLUSTER_SECRET_FILE",
}

// parseAgentFlags reads `baton agent` flags, each defaulting to its
// environment variable (flags win), and validates the result. Flag syntax
// errors are reported by the flag package on stderr and returned as is;
// invalid values come back as a *usageError naming every problem.
func parseAgentFlags(args []string, getenv func(string) string, stdout, stderr io.Writer) (agentConfig, error) {
	fs := flag.NewFlagSet("baton agent", flag.ContinueOnError)
	newUsageOut(fs, stdout, stderr)
	fs.String("config", "", "JSON file of flag values, {\"tls-cert\": \"...\", ...}: flags win over environment variables, which win over the file (env BATON_CONFIG)")
	rawEnv := getenv
	if rawEnv == nil {
		rawEnv = func(string) string { return "" }
	}
	getenv, cerr := withConfigFile(args, getenv, "BATON_CONFIG", agentEnv)
	if cerr != nil && !helpAsked(args) {
		return agentConfig{}, cerr
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	str := func(name, usage string) *string {
		return fs.String(name, getenv(agentEnv[name]), usage+" (env "+agentEnv[name]+")")
	}
	id := str("id", "this node's id, unique in the cluster and stable across restarts")
	dataDir := str("data-dir", "directory of the node's durable state (--dev: "+devDataDir+")")
	raftAddr := str("raft-addr", "host:port of the Raft transport, reachable by the other nodes (--dev: "+devRaftAddr+")")
	grpcAddr := str("grpc-addr", "host:port of the admin API, reachable by clients and the other nodes (--dev: "+devGRPCAddr+")")
	httpAddr := str("http-addr", "host:port of the web console (/), /status, /readyz, /metrics and /debug/pprof; empty: none (--dev: "+devHTTPAddr+")")
	allowedHosts := str("http-allowed-hosts", "names,... the HTTP port (console, /status, /metrics, ...) answers to besides IP addresses, localhost and the hosts of --http-addr, --grpc-addr and --raft-addr "+
		"(a name your browser or scraper uses for this node: a DNS name, a load balancer's); other names are refused (403), against DNS rebinding")
	peers := str("peers", "bootstrap members id=raft-host:port,...; identical on every node, used on first start only")
	join := str("join", "admin addresses host:port,... of members to join through, for a node added later")
	workers := str("workers", fmt.Sprintf("executor workers on the leader, 1..%d: a step holds its worker until its write commits, so the pool caps the steps one Raft write carries (default %d)", maxAgentWorkers, cluster.DefaultWorkers))
	submitRate := str("submit-rate", "calls per second each caller (its certificate's identity, else its IP address) may make that start procedures through this node; over it they are refused RESOURCE_EXHAUSTED; 0: no limit (default 0)")
	submitBurst := str("submit-burst", "such calls an idle caller may make at once (default: the rate, at least 1)")
	changeRate := str("change-rate", fmt.Sprintf("calls per second each caller may make that change state (every call the audit trail records) or that are refused (PERMISSION_DENIED, UNAUTHENTICATED, HTTP 401/403), on any port of this node; over it they are answered RESOURCE_EXHAUSTED (HTTP 429); 0: no limit (default %d)", admin.DefaultChangeRate))
	changeBurst := str("change-burst", fmt.Sprintf("such calls an idle caller may make at once (default %d)", admin.DefaultChangeBurst))
	tlsCA := str("tls-ca", "PEM file of the cluster's CA certificate: with --tls-cert and --tls-key, mutual TLS 1.3 on Raft, gRPC and HTTP ('baton tls ca create')")
	tlsCert := str("tls-cert", "PEM file of this master's certificate, naming baton://master/<--id> ('baton tls cert create --role master --id ID'); reread on SIGHUP and when it changes")
	tlsKey := str("tls-key", "PEM file of this master's private key")
	acl := str("acl", "on: every client call needs its permission (read, operate, admin), held by its certificate's name or a token ('baton acl'); off: everyone may call everything (default: on with TLS, off without)")
	clientAuth := str("client-auth", "how clients are known: cert, a client certificate of the CA on every connection (a token on top decides); "+
		"either, a certificate or a bearer token over TLS without one (--token with --tls-ca alone); token, a token only, a client's certificate granting nothing. "+
		"Masters and region servers always present certificates. token and either need --acl on (default cert)")
	aclGrants := str("acl-initial-grants", "client=permission,... bound whenever this master leads and finds the client unbound, e.g. ops=admin,prometheus=read (the way in besides the bootstrap token, which the cluster's first leader prints once)")
	bootTTL := str("acl-bootstrap-token-ttl", "the bootstrap token, which the cluster's first leader makes and prints once, expires this long after it is made, e.g. 24h; "+
		"make your own admin token or certificate binding before then (default: never; 'acl token delete' deletes it)")
	auditRetention := str("audit-retention", "drop audit records older than this, e.g. 720h (default 720h)")
	auditMax := str("audit-max-records", fmt.Sprintf("keep at most this many audit records, dropping the oldest (default %d)", admin.DefaultAuditMaxRecords))
	auditPerPrincipal := str("audit-max-per-principal", fmt.Sprintf("keep at most this many records of served calls per principal, dropping that principal's oldest (default %d)", admin.DefaultAuditMaxPerPrincipal))
	auditRefusedPerCaller := str("audit-max-refused-per-caller", fmt.Sprintf("keep at most this many refusals per principal and per source address, dropping that caller's oldest (default %d)", admin.DefaultAuditMaxRefusedPerCaller))
	auditFile := str("audit-file", "append every audit record this master commits to this file, one JSON line each (its own evidence copy, outliving the trail's pruning); empty: none")
	auditFileMax := str("audit-file-max-size", fmt.Sprintf("rotate --audit-file past this many MiB (default %d)", admin.DefaultAuditFileMaxBytes>>20))
	auditFileKeep := str("audit-file-keep", fmt.Sprintf("rotated audit files kept (FILE.1 the newest) (default %d)", admin.DefaultAuditFileKeep))
	clusterSecret := str("cluster-secret", fmt.Sprintf("without TLS, a secret of at least %d characters given to every master of the cluster, by which a master believes another's word on the calls it forwards (for whom, from where, already rate-limited); "+
		"without it a plaintext master believes no such word. Prefer --cluster-secret-file or the environment to the command line, which others may see", security.MinClusterSecretLen))
	clusterSecretFile := str("cluster-secret-file", "file holding --cluster-secret (surrounding white space ignored)")
	raftFlags := addRaftTimingFlags(str)
	connFlags := addConnLimitFlags(str)
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
	devDefault := boolEnv("dev")
	dev := fs.Bool("dev", devDefault, "single-node development cluster with loopback defaults (env "+agentEnv["dev"]+")")
	insecure := fs.Bool("insecure", boolEnv("insecure"), "allow plaintext on addresses other than loopback: anyone who reaches them can join, call the admin API or speak Raft (env "+agentEnv["insecure"]+")")
	debugEndpoints := fs.Bool("debug-endpoints", boolEnv("debug-endpoints"), "serve /debug/pprof/ (profiles) and /debug/domain (the whole replicated state) on --http-addr, "+
		"to admin permission under access control; off by default (env "+agentEnv["debug-endpoints"]+")")
	devRS := str("dev-regionservers", fmt.Sprintf("with --dev, how many simulated region servers (rs1, rs2, ...) run in this process, on free loopback ports; 0: none (default %d)", devRegionServers))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: baton agent [--dev [--dev-regionservers N]] [flags]\n\n"+
			"--dev runs a single-node cluster on loopback with %d simulated region servers\n"+
			"in the same process, so that every client command works against it.\n\nflags:\n", devRegionServers)
		printDefaults(fs, map[string]string{"workers": "int", "submit-rate": "float", "submit-burst": "int", "change-rate": "float", "change-burst": "int", "audit-retention": "duration", "acl-bootstrap-token-ttl": "duration",
			"audit-max-records": "int", "dev-regionservers": "int", "acl": "on|off", "audit-max-per-principal": "int", "audit-max-refused-per-caller": "int",
			"audit-file": "path", "audit-file-max-size": "MiB", "audit-file-keep": "int", "handshake-timeout": "duration", "max-conns-per-source": "int"})
	}
	pos, err := parse(fs, args)
	if err != nil {
		return agentConfig{}, err
	}
	if envErr != nil {
		return agentConfig{}, envErr
	}
	cfg := agentConfig{ID: *id, DataDir: *dataDir, RaftAddr: *raftAddr, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, Dev: *dev,
		TLS: security.Files{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey}, Insecure: *insecure}
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
	// rate and burst set *dst from a rate limit flag's value, if given;
	// burst says whether it was.
	rate := func(name, v string, dst *float64) {
		if v = strings.TrimSpace(v); v == "" {
			return
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || (admin.RateLimit{Rate: r}).Validate() != nil {
			bad("--%s %q: want 0 (no limit) or calls per second in [%g, %g], e.g. 50 or 0.5", name, v, admin.MinSubmitRate, admin.MaxSubmitRate)
		}
		*dst = r
	}
	burst := func(name, v string, dst *int) bool {
		if v = strings.TrimSpace(v); v == "" {
			return false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > int(admin.MaxSubmitRate) {
			bad("--%s %q: want a number of calls in 1..%d", name, v, int(admin.MaxSubmitRate))
		}
		*dst = n
		return true
	}
	rate("submit-rate", *submitRate, &cfg.SubmitRate)
	if burst("submit-burst", *submitBurst, &cfg.SubmitBurst) && cfg.SubmitRate == 0 {
		bad("--submit-burst is the burst of --submit-rate: give the rate too")
	}
	cfg.ChangeRate, cfg.ChangeBurst = admin.DefaultChangeRate, admin.DefaultChangeBurst
	rate("change-rate", *changeRate, &cfg.ChangeRate)
	burst("change-burst", *changeBurst, &cfg.ChangeBurst)
	cfg.ACL = cfg.TLS.Enabled()
	switch v := strings.TrimSpace(*acl); v {
	case "":
	case "on":
		cfg.ACL = true
	case "off":
		cfg.ACL = false
	default:
		bad("--acl %q: want on or off", v)
	}
	// The default stays cert: either lets connections without a
	// certificate through the TLS handshake (refused above it unless they
	// carry a token), which a deployment that relies on the handshake to
	// keep strangers out, or runs --acl off, did not ask for.
	if v := strings.TrimSpace(*clientAuth); v != "" {
		ca, err := security.ParseClientAuth(v)
		if err != nil {
			bad("--client-auth %q: want cert, token or either", v)
		}
		cfg.ClientAuth = ca
	}
	if cfg.ClientAuth.CertOptional() {
		switch {
		case !cfg.TLS.Enabled():
			bad("--client-auth %s needs TLS (--tls-ca, --tls-cert, --tls-key): a token is a secret, sent only over TLS, and the masters still know each other by certificate", cfg.ClientAuth)
		case !cfg.ACL:
			bad("--client-auth %s needs --acl on: without access control a caller with no certificate would be anyone, and could call everything", cfg.ClientAuth)
		}
	}
	if cfg.ACL && !cfg.TLS.Enabled() {
		bad("--acl on needs TLS (--tls-ca, --tls-cert, --tls-key): without certificates the masters cannot tell one another from clients, and would refuse each other's registrations and forwarded calls")
	}
	if v := strings.TrimSpace(*aclGrants); v != "" {
		cfg.ACLInitialGrants = map[string]security.Permission{}
		for _, g := range strings.Split(v, ",") {
			name, perm, ok := strings.Cut(strings.TrimSpace(g), "=")
			p, perr := security.ParsePermission(perm)
			if !ok || perr != nil || (security.Identity{Role: security.RoleClient, ID: name}).Validate() != nil {
				bad("--acl-initial-grants: %q: want client=permission, the client's certificate name and read, operate or admin", strings.TrimSpace(g))
				continue
			}
			cfg.ACLInitialGrants[name] = p
		}
	}
	if v := strings.TrimSpace(*bootTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			bad("--acl-bootstrap-token-ttl %q: want a duration of at least 1m, e.g. 24h", v)
		}
		cfg.ACLBootstrapTokenTTL = d
	}
	if v := strings.TrimSpace(*auditRetention); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			bad("--audit-retention %q: want a duration of at least 1m, e.g. 720h", v)
		}
		cfg.AuditRetention = d
	}
	if v := strings.TrimSpace(*auditMax); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || (admin.Access{AuditMaxRecords: n}).Validate() != nil {
			bad("--audit-max-records %q: want a number of records in 1..10000000", v)
		}
		cfg.AuditMaxRecords = n
	}
	count := func(name, v string, max int) int {
		v = strings.TrimSpace(v)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			bad("--%s %q: want a number in 1..%d", name, v, max)
		}
		return n
	}
	cfg.AuditMaxPerPrincipal = count("audit-max-per-principal", *auditPerPrincipal, 10_000_000)
	cfg.AuditMaxRefusedPerCaller = count("audit-max-refused-per-caller", *auditRefusedPerCaller, 10_000_000)
	if p := strings.TrimSpace(*auditFile); p != "" {
		cfg.AuditFile = &admin.AuditExport{Path: p, MaxBytes: int64(count("audit-file-max-size", *auditFileMax, 1<<20)) << 20, Keep: count("audit-file-keep", *auditFileKeep, 1000)}
	} else if strings.TrimSpace(*auditFileMax) != "" || strings.TrimSpace(*auditFileKeep) != "" {
		bad("--audit-file-max-size and --audit-file-keep rotate --audit-file: give it too")
	}
	cfg.ClusterSecret = parseClusterSecret(*clusterSecret, *clusterSecretFile, cfg.TLS.Enabled(), bad)
	cfg.Raft = raftFlags.parse(bad)
	cfg.ConnLimits = connFlags.parse(bad)
	cfg.DebugEndpoints = *debugEndpoints
	if v := strings.TrimSpace(*workers); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAgentWorkers {
			bad("--workers %q: want a number of executor workers in 1..%d", v, maxAgentWorkers)
		}
		cfg.Workers = n
	}
	for _, h := range strings.Split(*allowedHosts, ",") {
		if strings.TrimSpace(h) == "" {
			continue
		}
		name, err := console.HostName(h)
		if err != nil || name == "" {
			bad("--http-allowed-hosts: %q is not a host name (letters, digits, '-', '_' and '.')", strings.TrimSpace(h))
			continue
		}
		cfg.HTTPAllowedHosts = append(cfg.HTTPAllowedHosts, name)
	}
	if cfg.Dev {
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
		if *peers != "" || *join != "" {
			bad("--dev runs a single-node cluster: drop --peers and --join, or drop --dev")
		}
		cfg.Peers = []cluster.Peer{{ID: cfg.ID, Address: cfg.RaftAddr}}
		cfg.DevRegionServers = devRegionServers
		if v := strings.TrimSpace(*devRS); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 100 {
				bad("--dev-regionservers %q: want a number of region servers in 0..100", v)
			}
			cfg.DevRegionServers = n
		}
	} else {
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
		if *peers != "" && *join != "" {
			bad("give --peers (a new cluster's members) or --join (add this node to a running cluster), not both")
		}
	}
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
	if !cfg.Dev && *peers != "" {
		ps, err := cluster.ParsePeers(*peers)
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
	if !cfg.Dev && *join != "" {
		for _, a := range strings.Split(*join, ",") {
			a = strings.TrimSpace(a)
			if err := checkAddr("--join", a, false); err != nil {
				bad("%v", err)
				continue
			}
			cfg.Join = append(cfg.Join, a)
		}
	}
	if len(problems) > 0 {
		return cfg, &usageError{strings.Join(problems, "\n  ")}
	}
	return cfg, nil
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
