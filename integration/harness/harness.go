// Package harness runs real Baton clusters for the integration tests: it
// builds the baton binary once, starts `baton agent` processes on loopback
// ports, each with its own data directory and log file, and kills,
// terminates, pauses (SIGSTOP) and restarts them the way an operator, a
// crash or a frozen machine would. StartRegionServers adds `node
// regionserver` processes (KillRS, RestartRS, PauseRS, RSRegions for a
// server's own answer, RSClient for hand-made requests).
//
// A Cluster belongs to one test. Every process it starts runs in its own
// process group and is killed (SIGKILL to the group) by the test's cleanup,
// whether the test passed, failed or called t.Fatal; on Linux the processes
// also get SIGKILL if the test binary itself dies (Pdeathsig), so a go test
// timeout leaves nothing behind. The cluster's directory (data and logs) is
// removed after a passing test and kept, with its path printed, after a
// failing one.
//
// Typical use, from a TestMain that built the binary with Build:
//
//	c := harness.New(t, harness.Options{Binary: bin, Nodes: 3})
//	leader := c.WaitLeader(ctx)
//	id, _ := c.Client().Submit(ctx, "sleep", nil, "n-1", "", 0)
//	c.Kill(leader)
//	c.Restart(leader)
//
// With region servers:
//
//	c.StartRegionServers(3, harness.RSOptions{OpLatency: 20 * time.Millisecond})
//	codes, _ := c.WaitRegionServers(ctx) // start codes by id
//	hosted, _ := c.RSRegions(ctx, "rs1") // rs1's own answer
//	c.KillRS("rs1")
//	c.RestartRS("rs1")
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness/process"
	"github.com/baton-dev/baton/internal/locked"
)

// Build compiles the baton binary (github.com/baton-dev/baton/cmd/node) into
// dir and returns its path. Extra go build flags (e.g. "-race") may be
// given. Call it once per test binary, from TestMain.
func Build(dir string, flags ...string) (string, error) {
	bin := filepath.Join(dir, "baton")
	args := append([]string{"build", "-o", bin}, flags...)
	args = append(args, "github.com/baton-dev/baton/cmd/node")
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return bin, nil
}

// RunWithBinary runs m, the tests of one test binary, with the baton binary
// they start: BATON_NODE_BIN if set, else one Build makes for this run (under
// the race detector if BATON_NODE_RACE is set) in a temporary directory named
// after prefix, removed when m is done, which also holds the released
// binaries BuildRelease makes. It sets *bin before any test runs and
// returns m's exit code; call it from TestMain.
func RunWithBinary(m *testing.M, prefix string, bin *string) int {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Processes may run under uids of their own (Options.UIDBase): they
	// must reach the binary.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Released binaries (BuildRelease) are built here too, even when the
	// current one is given.
	buildDir.Lock()
	buildDir.path = dir
	buildDir.Unlock()
	if b := os.Getenv("BATON_NODE_BIN"); b != "" {
		*bin = b
		return m.Run()
	}
	var flags []string
	if os.Getenv("BATON_NODE_RACE") != "" {
		flags = append(flags, "-race") // the agents themselves under the race detector
	}
	start := time.Now()
	*bin, err = Build(dir, flags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if testing.Verbose() {
		fmt.Printf("built %s in %v\n", *bin, time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

// Options configures New.
type Options struct {
	// Binary is the baton binary built by Build. Required.
	Binary string
	// Nodes is the number of bootstrap members (default 3), named n1..nN.
	Nodes int
	// LogLevel is BATON_LOG_LEVEL of the agents (default "info").
	LogLevel string
	// Env is added to every agent's environment (KEY=VALUE).
	Env []string
	// UIDBase, if positive, runs every process under a numeric uid of its
	// own (no account needed): agent n<i> as UIDBase+i, region server
	// rs<k> as UIDBase+100+k. iptables' owner match (`-m owner
	// --uid-owner`) can then single out one process's loopback traffic,
	// which addresses cannot: every loopback dial has source 127.0.0.1.
	// The test must run as root, and Binary and every directory above it
	// must be readable and searchable by other users. Each agent's
	// directory is chown'd to its uid.
	UIDBase uint32
	// DataDirs, by node id, puts a node's data directory at the given path
	// (e.g. on a small file system a test mounts) instead of under the
	// cluster's directory. The harness does not remove these.
	DataDirs map[string]string
	// Binaries, by node or region server id (n1, rs2), starts that
	// process with another binary than Binary, e.g. a released one
	// (BuildRelease); RestartWith and RestartRSWith change it later.
	Binaries map[string]Binary
	// TLS runs every channel with mutual TLS: the harness makes a CA in
	// the cluster's directory (Cluster.PKI), a certificate for each agent
	// and region server, and one for its own client (baton://client/harness),
	// which Client, NewClient, RSClient and the HTTP reads use.
	TLS bool
}

// Node is one member of a Cluster. Its addresses and directories stay the
// same across restarts.
type Node struct {
	ID       string
	RaftAddr string
	GRPCAddr string
	HTTPAddr string
	DataDir  string
	LogPath  string
	// UID is the uid the agent runs as (Options.UIDBase), 0 when it runs
	// as the test does.
	UID uint32
	// Joiner: started by AddNode, without --peers; it serves nothing
	// until a member adds it ('baton cluster join').
	Joiner bool

	proc
}

// proc is one restartable process (an agent or a region server), run by
// package process; the harness adds its start banner, its environment and
// a pause that waits for the stop to take.
type proc struct {
	p   process.Process
	uid uint32 // run as this uid (0: as the test)
	bin Binary // what it runs; guarded by the cluster's mu
}

// Running reports whether the process is alive (started and not yet
// exited). A paused (SIGSTOP) process is running.
func (p *proc) Running() bool { return p.p.Running() }

// run starts bin with args and env added to the test's environment,
// appending its output to logPath; name is what the log's start banner
// calls it.
func (p *proc) run(name, bin string, args, env []string, logPath string) error {
	return p.p.Start(process.Spec{Name: name, Bin: bin, Args: args, Env: append(os.Environ(), env...),
		LogPath: logPath, Banner: "harness", UID: p.uid})
}

// kill sends SIGKILL to the process group and waits until it has exited.
func (p *proc) kill() error { return p.p.Kill() }

// signal sends sig to the running process's group.
func (p *proc) signal(sig syscall.Signal) error { return p.p.SignalGroup(sig) }

// pauseTimeout bounds the wait for SIGSTOP to take effect: threads in
// uninterruptible sleep (a disk write) stop only once it ends.
const pauseTimeout = 10 * time.Second

// pause sends SIGSTOP to the process group and returns once the kernel
// has stopped every thread in it. kill(2) returns as soon as the signal is
// queued; the group stops only when one of its threads next enters the
// kernel, and until then the others run on (on a loaded machine, for up
// to ~200 ms measured): a "frozen" leader still answers /status as
// leader, still sends Raft heartbeats. A test that pauses a node must be
// able to rely on it being frozen.
func (p *proc) pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	pgid := p.p.Pid()
	deadline := time.Now().Add(pauseTimeout)
	for {
		stopped, err := groupStopped(pgid)
		if err != nil {
			return fmt.Errorf("SIGSTOP sent, but its effect cannot be read: %w", err)
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every thread stopped %v after SIGSTOP", pauseTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// currentLog returns what was logged since the latest start.
func (p *proc) currentLog() string { return p.p.LogSinceStart() }

// reap kills the process group, if one was started, and waits at most
// 10 s for it to exit.
func (p *proc) reap(t testing.TB, name string) {
	if err := p.p.Kill(); err != nil && !errors.Is(err, process.ErrNotStarted) {
		t.Logf("harness: %s: %v", name, err)
	}
}

// Cluster is a set of node processes started by New.
type Cluster struct {
	t    testing.TB
	opts Options
	dir  string

	Nodes []*Node
	// RegionServers are the region server processes started by
	// StartRegionServers, in order.
	RegionServers []*RegionServer

	mu      sync.Mutex
	client  *client.Client
	rsConns map[string]*grpc.ClientConn // by region server id
	leader  string                      // last leader seen by WaitLeader
	http    *http.Client

	pki         *security.TestPKI     // Options.TLS
	clientCreds *security.Credentials // the harness's client certificate
	issued      map[security.Identity]security.Files
}

// New starts opts.Nodes agents bootstrapping one cluster and registers
// their teardown with t.Cleanup. It does not wait for a leader (see
// WaitLeader).
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Binary == "" {
		t.Fatal("harness: Options.Binary is required (see Build)")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	dir, err := os.MkdirTemp("", "baton-it-"+sanitize(t.Name())+"-")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	c := &Cluster{t: t, opts: opts, dir: dir, http: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.cleanup)
	if opts.TLS {
		if err := c.setUpTLS(); err != nil {
			t.Fatalf("harness: TLS: %v", err)
		}
	}
	if opts.UIDBase > 0 {
		// MkdirTemp makes the directory 0700: the agents' own uids must
		// reach their directories inside it.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}

	ports := FreePorts(t, 3*opts.Nodes)
	for i := range opts.Nodes {
		id := fmt.Sprintf("n%d", i+1)
		n := &Node{
			ID:       id,
			RaftAddr: ports[3*i],
			GRPCAddr: ports[3*i+1],
			HTTPAddr: ports[3*i+2],
			DataDir:  filepath.Join(dir, id, "data"),
			LogPath:  filepath.Join(dir, id, "agent.log"),
		}
		if d := opts.DataDirs[id]; d != "" {
			n.DataDir = d
		}
		for _, d := range []string{filepath.Dir(n.DataDir), filepath.Dir(n.LogPath)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatalf("harness: %v", err)
			}
		}
		if opts.UIDBase > 0 {
			n.UID = opts.UIDBase + uint32(i+1)
			n.uid = n.UID
			if err := os.Chown(filepath.Dir(n.DataDir), int(n.UID), int(n.UID)); err != nil {
				t.Fatalf("harness: run %s as uid %d: %v", id, n.UID, err)
			}
		}
		n.bin = c.binaryFor(id)
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := c.start(n); err != nil {
			t.Fatalf("harness: start %s: %v", n.ID, err)
		}
	}
	return c
}

// Dir returns the directory holding every node's data and log.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) peers() string {
	var p []string
	for _, n := range c.Nodes {
		if n.Joiner {
			continue // not a bootstrap member
		}
		p = append(p, n.ID+"="+n.RaftAddr)
	}
	return strings.Join(p, ",")
}

// binaryFor is the binary process id starts with (Options.Binaries).
func (c *Cluster) binaryFor(id string) Binary {
	if b, ok := c.opts.Binaries[id]; ok {
		return b
	}
	return Binary{Path: c.opts.Binary}
}

// BinaryOf returns the binary node or region server id runs (or last ran).
func (c *Cluster) BinaryOf(id string) Binary {
	for _, n := range c.Nodes {
		if n.ID == id {
			return locked.Load(&c.mu, &n.bin)
		}
	}
	return locked.Load(&c.mu, &c.RegionServer(id).bin)
}

// Args returns the agent command line of node id (without the binary),
// identical for first start and restart with the same binary.
func (c *Cluster) Args(id string) []string {
	n := c.Node(id)
	return c.agentArgs(n, locked.Load(&c.mu, &n.bin))
}

// agentArgs is node n's command line for binary b. A released binary gets
// only the flags it knows: each flag added since the oldest release is
// passed to it by its environment variable instead (agentEnv), which the
// current binary reads and an older one ignores.
func (c *Cluster) agentArgs(n *Node, b Binary) []string {
	args := []string{"agent", "--id", n.ID, "--data-dir", n.DataDir,
		"--raft-addr", n.RaftAddr, "--grpc-addr", n.GRPCAddr, "--http-addr", n.HTTPAddr}
	if !n.Joiner {
		args = append(args, "--peers", c.peers())
	}
	if b.Release == "" {
		// Tests read each node's state through /debug/domain (Domain), and
		// a stuck node's goroutines through /debug/pprof.
		args = append(args, "--debug-endpoints")
	}
	if c.pki != nil {
		// With TLS the agents enforce access control: the harness's own
		// certificate is the cluster's admin.
		args = append(args, "--acl-initial-grants", clientIdentity.ID+"=admin")
	}
	return append(args, c.tlsArgs(security.Identity{Role: security.RoleMaster, ID: n.ID})...)
}

// agentEnv is what a released binary b is given by environment instead of
// by a flag it would reject (agentArgs). 0.1.0 serves the debug endpoints
// unconditionally; a later release reads the variable.
func agentEnv(b Binary) []string {
	if b.Release == "" {
		return nil
	}
	return []string{"BATON_DEBUG_ENDPOINTS=1"}
}

func (c *Cluster) start(n *Node, extra ...string) error {
	b := locked.Load(&c.mu, &n.bin)
	env := append([]string{"BATON_LOG_LEVEL=" + c.opts.LogLevel}, agentEnv(b)...)
	env = append(env, c.opts.Env...)
	return n.run(n.ID, b.Path, append(c.agentArgs(n, b), extra...), env, n.LogPath)
}

// RestartArgs starts node id again as Restart does, with extra added to
// its command line for this start only (e.g. --recover-quorum). The node
// must have exited.
func (c *Cluster) RestartArgs(id string, extra ...string) {
	c.t.Helper()
	c.must("restart", id, c.start(c.Node(id), extra...))
}

// AddNode starts a new agent id on fresh loopback ports with an empty data
// directory and without --peers (Node.Joiner): a member to be, which
// serves nothing until a member adds it ('baton cluster join --id id
// --raft-addr ... --admin-addr ...'). Client does not know it; NewClient
// and AdminAddrs do.
func (c *Cluster) AddNode(id string) *Node {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.ID == id {
			c.t.Fatalf("harness: add %s: a node of that id exists", id)
		}
	}
	if c.opts.UIDBase > 0 {
		c.t.Fatalf("harness: add %s: not with Options.UIDBase", id)
	}
	ports := FreePorts(c.t, 3)
	n := &Node{ID: id, RaftAddr: ports[0], GRPCAddr: ports[1], HTTPAddr: ports[2],
		DataDir: filepath.Join(c.dir, id, "data"), LogPath: filepath.Join(c.dir, id, "agent.log"), Joiner: true}
	if err := os.MkdirAll(filepath.Join(c.dir, id), 0o755); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	n.bin = c.binaryFor(id)
	c.Nodes = append(c.Nodes, n) // Nodes is the test goroutine's
	c.must("start", id, c.start(n))
	return n
}

// Node returns the node with this id; it fails the test if there is none.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("harness: no node %q", id)
	return nil
}

// AdminAddrs returns every node's admin (gRPC) address.
func (c *Cluster) AdminAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.GRPCAddr)
	}
	return a
}

// Client returns a client of the whole cluster (every node's admin
// address), made on first use and closed at cleanup.
func (c *Cluster) Client() *client.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		cl, err := client.New(c.AdminAddrs(), client.WithCallTimeout(10*time.Second), client.WithAttemptTimeout(2*time.Second), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond),
			client.WithDialOptions(c.DialOptions(security.RoleMaster)...))
		if err != nil {
			c.t.Fatalf("harness: client: %v", err)
		}
		c.client = cl
	}
	return c.client
}

// NewClient returns a separate client of the whole cluster, closed at
// cleanup: for concurrent load whose connection churn should not disturb
// the shared one.
func (c *Cluster) NewClient(opts ...client.Option) *client.Client {
	cl, err := client.New(c.AdminAddrs(), append([]client.Option{client.WithDialOptions(c.DialOptions(security.RoleMaster)...)}, opts...)...)
	if err != nil {
		c.t.Fatalf("harness: client: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Status fetches node id's /status document.
func (c *Cluster) Status(ctx context.Context, id string) (admin.StatusJSON, error) {
	var st admin.StatusJSON
	err := c.getJSON(ctx, id, "/status", &st)
	return st, err
}

// ErrNoDomainEndpoint is returned by Domain when the node does not serve
// /debug/domain (404, or 501: no domain state).
var ErrNoDomainEndpoint = errors.New("harness: node does not serve /debug/domain")

// Domain returns the domain key/value entries under prefix that node id's
// FSM holds, from GET /debug/domain?prefix=P ({"entries": {k: v}}).
func (c *Cluster) Domain(ctx context.Context, id, prefix string) (map[string]string, error) {
	var doc struct {
		Entries   map[string]string `json:"entries"`
		Truncated bool              `json:"truncated"`
	}
	if err := c.getJSON(ctx, id, "/debug/domain?prefix="+url.QueryEscape(prefix), &doc); err != nil {
		return nil, err
	}
	if doc.Truncated {
		return doc.Entries, fmt.Errorf("harness: %s /debug/domain?prefix=%s: truncated at %d entries", id, prefix, len(doc.Entries))
	}
	if doc.Entries == nil {
		doc.Entries = map[string]string{}
	}
	return doc.Entries, nil
}

func (c *Cluster) getJSON(ctx context.Context, id, path string, v any) error {
	n := c.Node(id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.HTTPScheme()+"://"+n.HTTPAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusNotImplemented) && strings.HasPrefix(path, "/debug/domain") {
		return ErrNoDomainEndpoint
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("harness: %s %s: %s: %s", n.ID, path, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("harness: %s %s: %w", n.ID, path, err)
	}
	return nil
}

// WaitLeader waits until the cluster has a leader that is ready to serve:
// the client's ClusterStatus names it, it is a running node, and its own
// /status says it is Leader with a running executor. It returns the
// leader's id, or fails the test when ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context) string {
	c.t.Helper()
	id, err := c.AwaitLeader(ctx)
	if err != nil {
		c.t.Fatalf("harness: no ready leader: %v", err)
	}
	return id
}

// AwaitLeader is WaitLeader returning an error instead of failing the
// test, for use off the test goroutine.
func (c *Cluster) AwaitLeader(ctx context.Context) (string, error) {
	var last error
	for {
		id, err := c.readyLeader(ctx)
		if err == nil {
			c.mu.Lock()
			c.leader = id
			c.mu.Unlock()
			return id, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) readyLeader(ctx context.Context) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Client().Status(sctx)
	if err != nil {
		return "", err
	}
	id := st.GetLeaderId()
	if id == "" {
		return "", errors.New("status names no leader")
	}
	var n *Node
	for _, m := range c.Nodes {
		if m.ID == id {
			n = m
		}
	}
	if n == nil || !n.Running() {
		return "", fmt.Errorf("leader %q is not a running node", id)
	}
	hs, err := c.Status(sctx, id)
	if err != nil {
		return "", err
	}
	if hs.State != "Leader" || !hs.Executor {
		return "", fmt.Errorf("%s: state %s, executor %v", id, hs.State, hs.Executor)
	}
	return id, nil
}

// Leader returns the leader last found by WaitLeader ("" if none yet).
func (c *Cluster) Leader() string { return locked.Load(&c.mu, &c.leader) }

// Followers returns the ids of the running nodes other than leader.
func (c *Cluster) Followers(leader string) []string {
	var f []string
	for _, n := range c.Nodes {
		if n.ID != leader && n.Running() {
			f = append(f, n.ID)
		}
	}
	return f
}

// Kill sends SIGKILL to node id's process group and waits until it has
// exited, as a crash would leave it: no leadership transfer, no flush.
func (c *Cluster) Kill(id string) {
	c.t.Helper()
	c.must("kill", id, c.KillErr(id))
}

// must fails the test if err, what went wrong doing what to node or region
// server id.
func (c *Cluster) must(what, id string, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("harness: %s %s: %v", what, id, err)
	}
}

// KillErr is Kill returning an error, for use off the test goroutine.
func (c *Cluster) KillErr(id string) error {
	return c.Node(id).kill()
}

// Pause sends SIGSTOP to node id's process group and returns once every
// thread in it has stopped: the process stays alive and keeps its sockets
// (peers can connect, the kernel buffers what they send) but runs nothing,
// like a machine cut off from the network or frozen by a long pause,
// until Resume.
func (c *Cluster) Pause(id string) {
	c.t.Helper()
	c.must("pause", id, c.Node(id).pause())
}

// Resume sends SIGCONT to node id's process group (see Pause).
func (c *Cluster) Resume(id string) {
	c.t.Helper()
	c.must("resume", id, c.Node(id).signal(syscall.SIGCONT))
}

// Term sends SIGTERM to node id (the agent then shuts down gracefully:
// executor stop, leadership transfer) and waits for it to exit, at most
// timeout. It returns the process's exit code; -1 means it did not exit in
// time (it is then killed).
func (c *Cluster) Term(id string, timeout time.Duration) int {
	c.t.Helper()
	n := c.Node(id)
	if err := n.p.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatalf("harness: term %s: %v", id, err)
	}
	select {
	case <-n.p.Done():
	case <-time.After(timeout):
		_ = n.p.Kill()
		return -1
	}
	return n.p.ExitCode()
}

// Restart starts node id again with the same command line and data
// directory. The node must have exited (Kill or Term).
func (c *Cluster) Restart(id string) {
	c.t.Helper()
	c.must("restart", id, c.RestartErr(id))
}

// RestartErr is Restart returning an error, for use off the test
// goroutine.
func (c *Cluster) RestartErr(id string) error {
	return c.start(c.Node(id))
}

// RestartWith starts node id again as Restart does (same id, data
// directory and addresses), with binary b from now on: an upgrade or a
// downgrade. The node must have exited (Kill or Term).
func (c *Cluster) RestartWith(id string, b Binary) {
	c.t.Helper()
	n := c.Node(id)
	c.mu.Lock()
	n.bin = b
	c.mu.Unlock()
	c.must("restart", id, c.start(n))
}

// WaitUp waits until node id answers /status and knows a leader.
func (c *Cluster) WaitUp(ctx context.Context, id string) (admin.StatusJSON, error) {
	for {
		st, err := c.Status(ctx, id)
		if err == nil && st.LeaderID != "" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("%s not up: %w (last: %v)", id, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitClusterFormat waits until every node's /status says the cluster
// version is at least want: the masters then write what that version
// allows (docs/upgrades.md). The leader raises it once every member has
// registered its binary, shortly after a cluster of one build starts.
func (c *Cluster) WaitClusterFormat(ctx context.Context, want uint32) error {
	for {
		var last error
		for _, n := range c.Nodes {
			st, err := c.Status(ctx, n.ID)
			if err == nil && st.ClusterFormat < want {
				err = fmt.Errorf("%s holds cluster version %d", n.ID, st.ClusterFormat)
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster version %d: %w (last: %v)", want, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Signal sends sig to node id's process group (e.g. SIGQUIT, for the Go
// runtime's goroutine dump in its log).
func (c *Cluster) Signal(id string, sig syscall.Signal) error {
	return c.Node(id).signal(sig)
}

// WaitExit waits until node id's current process has exited (e.g. one
// that refuses to start) and returns its exit code, or an error when ctx
// ends first.
func (c *Cluster) WaitExit(ctx context.Context, id string) (int, error) {
	done := c.Node(id).p.Done()
	if done == nil {
		return 0, fmt.Errorf("harness: %s never started", id)
	}
	select {
	case <-done:
		return c.Node(id).p.ExitCode(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("harness: %s still running: %w", id, ctx.Err())
	}
}

// CurrentLog returns what node id has logged since its latest start.
func (c *Cluster) CurrentLog(id string) string {
	n := c.Node(id)
	return n.currentLog()
}

// Converge waits until every running node's FSM has applied the same
// index and that index stays put for settle (no writes in flight), and
// returns it.
func (c *Cluster) Converge(ctx context.Context, settle time.Duration) (uint64, error) {
	var last uint64
	var since time.Time
	for {
		idx, same := uint64(0), true
		var errs []error
		first := true
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := c.Status(ctx, n.ID)
			if err != nil {
				errs = append(errs, err)
				same = false
				continue
			}
			if first {
				idx, first = st.FSMIndex, false
			} else if st.FSMIndex != idx {
				same = false
			}
		}
		switch {
		case !same || idx == 0:
			since = time.Time{}
		case idx != last || since.IsZero():
			last, since = idx, time.Now()
		case time.Since(since) >= settle:
			return idx, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("harness: nodes did not converge: %w (errors: %v)", ctx.Err(), errors.Join(errs...))
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	if c.client != nil {
		c.client.Close()
	}
	for _, cc := range c.rsConns {
		cc.Close()
	}
	c.mu.Unlock()
	for _, n := range c.Nodes {
		n.reap(c.t, n.ID)
	}
	for _, s := range c.RegionServers {
		s.reap(c.t, s.ID)
	}
	if c.t.Failed() || os.Getenv("BATON_KEEP_LOGS") != "" {
		c.t.Logf("harness: cluster data and logs kept in %s", c.dir)
		for _, n := range c.Nodes {
			c.t.Logf("harness: %s log: %s", n.ID, n.LogPath)
		}
		for _, s := range c.RegionServers {
			c.t.Logf("harness: %s log: %s", s.ID, s.LogPath)
		}
		return
	}
	_ = os.RemoveAll(c.dir)
}

// FreePorts returns k distinct free loopback addresses (127.0.0.1:port).
// The ports are free when returned; another process could take one before
// it is bound, which on a test machine is rare enough.
func FreePorts(t testing.TB, k int) []string {
	t.Helper()
	addrs, err := process.FreeAddrs(k)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return addrs
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, s)
}
