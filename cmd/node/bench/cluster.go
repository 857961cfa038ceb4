package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness/process"
	"github.com/baton-dev/baton/internal/memstat"
)

// benchProc is one process `baton bench` started: a master or a region
// server, restartable with the same command line.
type benchProc struct {
	name    string
	bin     string
	args    []string
	logPath string
	process.Process
}

// benchEnv is the environment of every process the bench starts: the
// bench's own without BATON_* variables (a BATON_DEV or BATON_PEERS set for
// the user's own cluster must not reach these), plus the log level.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			env = append(env, kv)
		}
	}
	return append(env, "BATON_LOG_LEVEL=info")
}

// start runs the process, appending its output to its log.
func (p *benchProc) start() error {
	if err := p.Start(process.Spec{Name: p.name, Bin: p.bin, Args: p.args, Env: benchEnv(), LogPath: p.logPath}); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	return nil
}

// benchMaster is one `baton agent` of the bench's cluster.
type benchMaster struct {
	id, raftAddr, grpcAddr, httpAddr, dataDir string
	benchProc
}

// benchCluster is the cluster one row of `baton bench scale` runs on: 3
// masters and K region servers on loopback, in dir.
type benchCluster struct {
	dir     string
	masters []*benchMaster
	servers []*benchProc
	cl      *client.Client
	http    *http.Client
	// scheme is the masters' HTTP scheme: https with TLS.
	scheme string
	// cliArgs are the client flags a `baton` command the bench runs
	// against the cluster needs (the bench's own certificate with TLS).
	cliArgs []string
}

// startBenchCluster starts 3 masters bootstrapping one cluster and
// regionServers region servers, with the command lines the integration
// harness and docker-compose use.
func startBenchCluster(bin, dir string, regionServers, workers int, withTLS bool) (*benchCluster, error) {
	const masters = 3
	addrs, err := process.FreeAddrs(3*masters + regionServers)
	if err != nil {
		return nil, err
	}
	c := &benchCluster{dir: dir, http: &http.Client{Timeout: 5 * time.Second}, scheme: "http"}
	// With TLS, a CA in the row's directory signs a certificate for each
	// process and one for the bench's own client, as 'baton tls' would.
	var pki *security.TestPKI
	var clientOpts []client.Option
	tlsArgs := func(security.Identity) ([]string, error) { return nil, nil }
	if withTLS {
		if pki, err = security.NewTestPKI(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
		tlsArgs = func(id security.Identity) ([]string, error) {
			f, err := pki.Issue(id, 24*time.Hour)
			if err != nil {
				return nil, err
			}
			return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}, nil
		}
		f, err := pki.Issue(security.Identity{Role: security.RoleClient, ID: "bench"}, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		creds, err := security.Load(f, nil, nil)
		if err != nil {
			return nil, err
		}
		clientOpts = append(clientOpts, client.WithDialOptions(creds.DialOption(security.RoleMaster)))
		c.cliArgs = []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
		c.http.Transport = &http.Transport{TLSClientConfig: creds.ClientConfig(security.RoleMaster)}
		c.scheme = "https"
	}
	var peers, admins []string
	for i := range masters {
		id := fmt.Sprintf("m%d", i+1)
		m := &benchMaster{id: id, raftAddr: addrs[3*i], grpcAddr: addrs[3*i+1], httpAddr: addrs[3*i+2],
			dataDir: filepath.Join(dir, id, "data")}
		m.name, m.bin, m.logPath = "master "+id, bin, filepath.Join(dir, id, "agent.log")
		c.masters = append(c.masters, m)
		peers = append(peers, id+"="+m.raftAddr)
		admins = append(admins, m.grpcAddr)
	}
	for _, m := range c.masters {
		m.args = []string{"agent", "--id", m.id, "--data-dir", m.dataDir, "--raft-addr", m.raftAddr,
			"--grpc-addr", m.grpcAddr, "--http-addr", m.httpAddr, "--peers", strings.Join(peers, ","),
			// --profile reads the masters' /debug/pprof/profile.
			"--debug-endpoints",
			// Every region server and client of a bench dials from
			// 127.0.0.1: the per-source cap must fit them all.
			"--max-conns-per-source", strconv.Itoa(max(security.DefaultMaxConnsPerSource, 8*regionServers))}
		if workers > 0 {
			m.args = append(m.args, "--workers", strconv.Itoa(workers))
		}
		// The bench's client submits as fast as the masters commit (the
		// commit sweep keeps 256 procedures in flight): it measures the
		// masters, not a limit meant for people and scripts.
		m.args = append(m.args, "--change-rate", "0")
		ta, err := tlsArgs(security.Identity{Role: security.RoleMaster, ID: m.id})
		if err != nil {
			return nil, err
		}
		if withTLS {
			// With TLS the masters enforce access control: the bench's
			// client is their admin.
			ta = append(ta, "--acl-initial-grants", "bench=admin")
		}
		m.args = append(m.args, ta...)
	}
	for i := range regionServers {
		id := fmt.Sprintf("rs%d", i+1)
		ta, err := tlsArgs(security.Identity{Role: security.RoleRegionServer, ID: id})
		if err != nil {
			return nil, err
		}
		s := &benchProc{name: "region server " + id, bin: bin, logPath: filepath.Join(dir, id, "regionserver.log"),
			args: append([]string{"regionserver", "--id", id, "--grpc-addr", addrs[3*masters+i], "--masters", strings.Join(admins, ",")}, ta...)}
		c.servers = append(c.servers, s)
	}
	c.cl, err = client.New(admins, append([]client.Option{client.WithCallTimeout(30 * time.Second), client.WithAttemptTimeout(10 * time.Second),
		client.WithBackoff(20*time.Millisecond, 500*time.Millisecond)}, clientOpts...)...)
	if err != nil {
		return nil, err
	}
	for _, m := range c.masters {
		if err := os.MkdirAll(filepath.Dir(m.dataDir), 0o755); err != nil {
			return c, err
		}
		if err := m.start(); err != nil {
			return c, err
		}
	}
	for _, s := range c.servers {
		if err := os.MkdirAll(filepath.Dir(s.logPath), 0o755); err != nil {
			return c, err
		}
		if err := s.start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// stop kills every process of the cluster and closes its client.
func (c *benchCluster) stop() error {
	var errs []error
	if c.cl != nil {
		c.cl.Close()
	}
	for _, m := range c.masters {
		errs = append(errs, m.Kill())
	}
	for _, s := range c.servers {
		errs = append(errs, s.Kill())
	}
	// A process the bench never got to start (an earlier one failed) has
	// nothing to stop.
	for i, err := range errs {
		if errors.Is(err, process.ErrNotStarted) {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// status fetches master m's /status document.
func (c *benchCluster) status(ctx context.Context, m *benchMaster) (admin.StatusJSON, error) {
	var st admin.StatusJSON
	body, err := c.get(ctx, m, "/status")
	if err != nil {
		return st, err
	}
	defer body.Close()
	if err := json.NewDecoder(body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s /status: %w", m.id, err)
	}
	return st, nil
}

func (c *benchCluster) get(ctx context.Context, m *benchMaster, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+m.httpAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s GET %s: %s", m.id, path, resp.Status)
	}
	return resp.Body, nil
}

// leader returns the master that says it leads with a running executor,
// or nil.
func (c *benchCluster) leader(ctx context.Context) *benchMaster {
	for _, m := range c.masters {
		if !m.Running() {
			continue
		}
		if st, err := c.status(ctx, m); err == nil && st.State == "Leader" && st.Executor {
			return m
		}
	}
	return nil
}

// poll calls cond every interval until it is done, fails, or ctx ends (the
// error then names what was awaited and cond's last word on it).
func poll(ctx context.Context, interval time.Duration, what string, cond func() (done bool, note string, err error)) error {
	return pollEvery(ctx, interval, false, what, cond)
}

// pollPaced is poll for a check that costs the cluster much (a list over a
// million regions): it runs at most a fifth of the time (every four times
// its own duration, if longer than interval), so that the bench does not
// load the masters it measures. Not for a check that fails slowly while
// the cluster is down (a submit during a failover): it would wait four
// times as long again and add that to the figure.
func pollPaced(ctx context.Context, interval time.Duration, what string, cond func() (done bool, note string, err error)) error {
	return pollEvery(ctx, interval, true, what, cond)
}

func pollEvery(ctx context.Context, interval time.Duration, paced bool, what string, cond func() (done bool, note string, err error)) error {
	var note string
	for {
		began := time.Now()
		done, n, err := cond()
		wait := interval
		if paced {
			wait = max(interval, 4*time.Since(began))
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		note = n
		select {
		case <-ctx.Done():
			if note != "" {
				return fmt.Errorf("%s: %w (last: %s)", what, ctx.Err(), note)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// waitLeader waits for a leader with a running executor.
func (c *benchCluster) waitLeader(ctx context.Context) (*benchMaster, error) {
	var l *benchMaster
	err := poll(ctx, 50*time.Millisecond, "waiting for a leader", func() (bool, string, error) {
		if err := c.exited(); err != nil {
			return false, "", err
		}
		l = c.leader(ctx)
		return l != nil, "no master leads yet", nil
	})
	return l, err
}

// exited is an error naming a master that should run but exited (it
// refused to start: its log says why).
func (c *benchCluster) exited() error {
	for _, m := range c.masters {
		if m.Crashed() {
			return fmt.Errorf("%s exited; see its log %s", m.name, m.logPath)
		}
	}
	return nil
}

// waitServers waits until n region servers are live on the leader.
func (c *benchCluster) waitServers(ctx context.Context, n int) error {
	return poll(ctx, 100*time.Millisecond, "waiting for the region servers to register", func() (bool, string, error) {
		if err := c.exited(); err != nil {
			return false, "", err
		}
		ss, err := c.cl.ListServers(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		live := 0
		for _, s := range ss {
			if s.GetLeaseState() == "live" {
				live++
			}
		}
		return live >= n, fmt.Sprintf("%d of %d live", live, n), nil
	})
}

// rssMB is process pid's resident set size in MB, or -1 where there is
// no /proc.
func rssMB(pid int) float64 {
	if mb, ok := memstat.RSSMB(pid); ok {
		return mb
	}
	return -1
}

// dirMB is the size in MB of the regular files under path (0 if absent).
func dirMB(path string) float64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return float64(n) / (1 << 20)
}

// newestSnapshotMB is the size of the newest raft snapshot in the data
// directory (the state as raft ships it to a follower that lags behind
// the log), 0 if there is none. raft names snapshot directories
// term-index-ms, so the newest sorts last.
func newestSnapshotMB(dataDir string) float64 {
	snaps := filepath.Join(dataDir, "snapshots")
	ents, err := os.ReadDir(snaps)
	if err != nil {
		return 0
	}
	var newest string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") && e.Name() > newest {
			newest = e.Name()
		}
	}
	if newest == "" {
		return 0
	}
	return dirMB(filepath.Join(snaps, newest))
}

// scrapeMetric sums the samples of metric name (all label sets) in master
// m's /metrics.
func (c *benchCluster) scrapeMetric(ctx context.Context, m *benchMaster, names ...string) (map[string]float64, error) {
	body, err := c.get(ctx, m, "/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for _, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
					out[name] += v
				}
			}
		}
	}
	return out, sc.Err()
}
