package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/cluster/regionserver"
	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/security"
)

// regionServerEnv maps each `baton regionserver` flag to its environment
// variable. --masters shares BATON_MASTERS with anything else that needs
// the masters' admin addresses (docker-compose sets it once).
var regionServerEnv = map[string]string{
	"id":                 "BATON_RS_ID",
	"grpc-addr":          "BATON_RS_GRPC_ADDR",
	"masters":            "BATON_MASTERS",
	"op-latency":         "BATON_RS_OP_LATENCY",
	"failure-rate":       "BATON_RS_FAILURE_RATE",
	"heartbeat-interval": "BATON_RS_HEARTBEAT_INTERVAL",
	"http-addr":          "BATON_RS_HTTP_ADDR",
	"tls-ca":             rsTLSEnv.CA,
	"tls-cert":           rsTLSEnv.Cert,
	"tls-key":            rsTLSEnv.Key,
	"insecure":           "BATON_INSECURE",
	// The agent's variable: a pod's listening host is the same whatever
	// it runs.
	"listen-host": "BATON_LISTEN_HOST",

	"http-allowed-hosts":   "BATON_RS_HTTP_ALLOWED_HOSTS",
	"handshake-timeout":    "BATON_RS_HANDSHAKE_TIMEOUT",
	"max-conns-per-source": "BATON_RS_MAX_CONNS_PER_SOURCE",
}

// rsTransport is how a region server process talks: its TLS files, or
// plaintext (allowed beyond loopback only with Insecure).
type rsTransport struct {
	TLS security.Files
	// TLSFrom says where each of TLS's files was named, for messages.
	TLSFrom  tlsSources
	Insecure bool
}

// regionServerStopTimeout bounds a graceful stop: in-flight batches are
// interrupted at once, so this only waits for connections to drain.
const regionServerStopTimeout = 10 * time.Second

func init() {
	topLevel.add(topCommand{
		name: "regionserver", rank: 20, run: (*cli).regionserver,
		summary: `run a simulated region server that registers with the masters`,
	})
}

// regionserver runs `baton regionserver`: parses its flags, then runs a
// simulated region server until SIGINT or SIGTERM.
func (c *cli) regionserver(args []string) int {
	cfg, tr, err := parseRegionServerFlags(args, c.getenv, c.stdout, c.stderr)
	if err != nil {
		return c.flagsFailed("regionserver", err)
	}
	// What `baton version` prints, as the agent gives its master.
	cfg.Build = semver.Current(readBuildInfo().Version)
	ctx, stop := signal.NotifyContext(c.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runRegionServer(ctx, cfg, tr, c.stdout, c.stderr); err != nil {
		return c.runFailed("regionserver", err)
	}
	return exitOK
}

// parseRegionServerFlags reads `baton regionserver` flags, each defaulting
// to its environment variable (flags win), and validates them. Flag syntax
// errors are reported by the flag package on stderr and returned as is;
// invalid values come back as a *usageError naming every problem.
func parseRegionServerFlags(args []string, getenv func(string) string, stdout, stderr io.Writer) (regionserver.Config, rsTransport, error) {
	fs, rawEnv, getenv, err := serverFlagSet("baton regionserver", args, getenv, regionServerEnv, stdout, stderr)
	if err != nil {
		return regionserver.Config{}, rsTransport{}, err
	}
	// Every flag is read as a string so that a bad value, from a flag or
	// from the environment, is reported with all the other problems.
	str := func(name, usage string) *string {
		return fs.String(name, getenv(regionServerEnv[name]), usage+" (env "+regionServerEnv[name]+")")
	}
	id := str("id", "this region server's id, unique among region servers and stable across restarts")
	grpcAddr := str("grpc-addr", "host:port the RegionServer service listens on and the masters call; must name this host")
	masters := str("masters", "admin addresses host:port,... of the masters (any subset; the leader is found through hints)")
	opLatency := str("op-latency", "time each region open or close takes, e.g. 50ms (default 0)")
	failureRate := str("failure-rate", "probability in [0,1] that a region open fails with \"injected failure\" (default 0)")
	heartbeat := str("heartbeat-interval", "heartbeat interval, overriding the one the master answers, e.g. 1s (default: the master's)")
	listenHost := str("listen-host", listenHostUsage("--grpc-addr"))
	httpAddr := str("http-addr", "host:port of /metrics, /readyz and /livez (a listening address: 0.0.0.0 is fine; with TLS, /readyz and /livez are served also without a client certificate, for a kubelet's probes); empty: none")
	allowedHosts := str("http-allowed-hosts", "names,... the HTTP port answers to besides IP addresses, localhost and the hosts of --grpc-addr and --http-addr "+
		"(a name a scraper uses for this server); other names are refused (403), against DNS rebinding")
	connFlags := addConnLimitFlags(str)
	tlsCA := str("tls-ca", "PEM file of the cluster's CA certificate: with --tls-cert and --tls-key, mutual TLS 1.3 to and from the masters")
	tlsCert := str("tls-cert", "PEM file of this server's certificate, naming baton://regionserver/<--id> ('baton tls cert create --role regionserver --id ID'); reread on SIGHUP and when it changes")
	tlsKey := str("tls-key", "PEM file of this server's private key")
	insecureEnv := strings.TrimSpace(getenv(regionServerEnv["insecure"]))
	insecureDefault, insecureEnvErr := false, error(nil)
	if insecureEnv != "" {
		insecureDefault, insecureEnvErr = strconv.ParseBool(insecureEnv)
	}
	insecure := fs.Bool("insecure", insecureDefault, "allow plaintext on addresses other than loopback: anyone who reaches them can open and close its regions (env "+regionServerEnv["insecure"]+")")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: baton regionserver --id ID --grpc-addr HOST:PORT --masters H:P,... [--listen-host HOST] [--http-addr HOST:PORT] [--op-latency D] [--failure-rate F]\n\n"+
			"Runs a simulated region server: it hosts regions in memory, registers with the\n"+
			"leading master and heartbeats until SIGINT or SIGTERM. With --http-addr it serves\n"+
			"Prometheus metrics on /metrics, its readiness on /readyz and liveness on /livez; the OTEL_*\n"+
			"environment variables turn tracing on (see README, \"Metrics and traces\").\n\nflags:\n")
		printDefaults(fs, map[string]string{"op-latency": "duration", "failure-rate": "float", "heartbeat-interval": "duration",
			"handshake-timeout": "duration", "max-conns-per-source": "int", "listen-host": "host"})
	}
	pos, err := parse(fs, args)
	if err != nil {
		return regionserver.Config{}, rsTransport{}, err
	}
	cfg := regionserver.Config{ID: strings.TrimSpace(*id), GRPCAddr: strings.TrimSpace(*grpcAddr), HTTPAddr: strings.TrimSpace(*httpAddr)}
	tr := rsTransport{TLS: security.Files{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey}}
	tr.TLSFrom = serverTLSSources(fs, rsTLSEnv, rawEnv, args, "BATON_CONFIG")
	if !tr.TLS.Enabled() {
		warn := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
		if f, src, ok := legacyServerTLS("regionserver", security.RoleRegionServer, rsTLSEnv, rawEnv, warn); ok {
			tr.TLS, tr.TLSFrom = f, src
		}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	tr.Insecure = *insecure
	if insecureEnvErr != nil && !flagSet(fs, "insecure") {
		bad("%s=%q: want true or false", regionServerEnv["insecure"], insecureEnv)
	}
	if err := validateTLS(tr.TLS, tr.TLSFrom, rsTLSEnv); err != nil {
		bad("%v", err)
	}
	if len(pos) > 0 {
		bad("takes no arguments, got %q", pos)
	}
	if cfg.ID == "" {
		bad("--id is required")
	}
	if cfg.GRPCAddr == "" {
		bad("--grpc-addr is required")
	} else if err := checkAddr("--grpc-addr", cfg.GRPCAddr, false); err != nil {
		bad("%v", err)
	}
	if cfg.HTTPAddr != "" {
		if err := checkAddr("--http-addr", cfg.HTTPAddr, true); err != nil {
			bad("%v", err)
		}
	}
	if host := parseListenHost(*listenHost, bad); host != "" {
		cfg.ListenAddr = listenOn(host, cfg.GRPCAddr)
		if _, hp, err := net.SplitHostPort(cfg.HTTPAddr); err == nil {
			if _, gp, err := net.SplitHostPort(cfg.GRPCAddr); err == nil && gp == hp && cfg.ListenAddr != cfg.HTTPAddr {
				bad("--listen-host %s: --grpc-addr and --http-addr both have port %s: each needs its own port", host, gp)
			}
		}
	}
	named := 0
	for _, m := range strings.Split(*masters, ",") {
		if m = strings.TrimSpace(m); m == "" {
			continue
		}
		named++
		if err := checkAddr("--masters", m, false); err != nil {
			bad("%v", err)
			continue
		}
		cfg.Masters = append(cfg.Masters, m)
	}
	if named == 0 {
		bad("--masters is required: the admin addresses of the masters, e.g. --masters 10.0.0.1:7070,10.0.0.2:7070")
	}
	duration := func(flagName, v string, dst *time.Duration) {
		if v = strings.TrimSpace(v); v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad("--%s %q: want a duration ≥ 0 such as 50ms or 1s", flagName, v)
			return
		}
		*dst = d
	}
	cfg.ConnLimits = connFlags.parse(bad)
	cfg.HTTPAllowedHosts = append(cfg.HTTPAllowedHosts, parseAllowedHosts(*allowedHosts, bad)...)
	duration("op-latency", *opLatency, &cfg.OpLatency)
	duration("heartbeat-interval", *heartbeat, &cfg.HeartbeatInterval)
	if v := strings.TrimSpace(*failureRate); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
			bad("--failure-rate %q: want a probability between 0 and 1, e.g. 0.05", v)
		} else {
			cfg.FailureRate = f
		}
	}
	if !tr.TLS.Enabled() && !tr.Insecure {
		var open []string
		for _, a := range [][2]string{{"--grpc-addr", cfg.GRPCAddr}, {"--http-addr", cfg.HTTPAddr}} {
			if a[1] != "" && !isLoopbackAddr(a[1]) {
				open = append(open, a[0]+" "+a[1])
			}
		}
		if cfg.ListenAddr != "" && !isLoopbackAddr(cfg.ListenAddr) {
			open = append(open, "--listen-host "+cfg.ListenAddr)
		}
		if len(open) > 0 {
			bad("%s: not loopback, and without TLS anyone who reaches it can open and close its regions; give --tls-ca, --tls-cert and --tls-key, or --insecure to run plaintext anyway",
				strings.Join(open, ", "))
		}
	}
	if len(problems) > 0 {
		return cfg, tr, &usageError{strings.Join(problems, "\n  ")}
	}
	// The flags' checks above name the flags; this one catches whatever
	// rs adds later.
	if err := cfg.Validate(); err != nil {
		return cfg, tr, usagef("%v", err)
	}
	return cfg, tr, nil
}

// runRegionServer runs a region server until ctx ends (SIGINT, SIGTERM),
// printing where it listens.
func runRegionServer(ctx context.Context, cfg regionserver.Config, tr rsTransport, stdout, stderr io.Writer) error {
	// As the agent: a test build whose format stamp was refused is not the
	// build its maker meant, and would register as something it is not.
	if err := semver.StampErr(); err != nil {
		return err
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "baton.rs." + cfg.ID, Level: hclog.LevelFromString(envOr("BATON_LOG_LEVEL", "info")), Output: stderr})
	if !tr.TLS.Enabled() && tr.Insecure {
		cfg.Logger.Warn("--insecure: plaintext; anyone who reaches this server's addresses can open and close its regions", "grpc_addr", cfg.GRPCAddr, "http_addr", cfg.HTTPAddr)
	}
	tlsc, err := loadProcessTLS(ctx, tr.TLS, tr.TLSFrom, security.Identity{Role: security.RoleRegionServer, ID: cfg.ID}, cfg.Logger)
	if err != nil {
		return err
	}
	cfg.TLS = tlsc.creds
	cfg.Metrics = processMetrics()
	tracing, err := startTracing(ctx, "baton-regionserver", cfg.ID, cfg.Logger)
	if err != nil {
		return err
	}
	defer tracing.shutdown()
	cfg.TracerProvider = tracing.provider()
	s, err := regionserver.New(cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "baton region server %q running\n  RegionServer (gRPC): %s\n  masters:             %s\n",
		cfg.ID, s.Addr(), strings.Join(cfg.Masters, ","))
	if cfg.ListenAddr != "" {
		fmt.Fprintf(stdout, "  listening on:        %s (--listen-host)\n", cfg.ListenAddr)
	}
	if a := s.HTTPAddr(); a != "" {
		scheme := tlsc.scheme()
		fmt.Fprintf(stdout, "  metrics:             %s://%s/metrics\n  readiness:           %s://%s/readyz\n  liveness:            %s://%s/livez\n", scheme, a, scheme, a, scheme, a)
	}
	if tlsc.creds != nil {
		fmt.Fprintf(stdout, "  TLS:                 mutual, as %s (certificate until %s)\n", tlsc.creds.Identity(), tlsc.creds.NotAfter().UTC().Format(time.RFC3339))
	}
	if tracing.tp != nil {
		fmt.Fprintf(stdout, "  traces:              OTLP (%s), from the OTEL_* environment\n", tracing.protocol)
	}
	if cfg.OpLatency > 0 || cfg.FailureRate > 0 {
		fmt.Fprintf(stdout, "  op latency:          %v\n  failure rate:        %g\n", cfg.OpLatency, cfg.FailureRate)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), regionServerStopTimeout)
	defer cancel()
	return s.Stop(sctx)
}
