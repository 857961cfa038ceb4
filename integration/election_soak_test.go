package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// TestElectionSoak is the leader-stability soak: a 3-master TLS cluster of
// agent processes runs for a while on a host in a given condition, and the
// test reports how often leadership changed (per 10 minutes), then how long
// a failover takes on that host (SIGKILL of the leader → the first
// procedure submitted after it done). It asserts no figure: it reports.
//
// Without BATON_SOAK it runs a 20 s idle check of the machinery (skipped
// with -short). With it:
//
//	BATON_SOAK=10m BATON_SOAK_CONDITIONS=idle,cpu,disk,cpu+disk \
//	  go test -run TestElectionSoak -v -timeout 60m ./integration/
//
// Conditions (comma-separated, each its own cluster in turn):
//
//	idle  nothing else running on the host.
//	cpu   BATON_SOAK_CPU busy-loop processes (default 4 × the CPUs).
//	disk  every master's data directory on its own loop-mounted ext4,
//	      all frozen (fsfreeze: writes and fsyncs block, as on a disk
//	      saturated by an image build) for BATON_SOAK_STALL (default 1s)
//	      every BATON_SOAK_STALL_EVERY (default 5s). Needs root, losetup,
//	      mkfs.ext4 and fsfreeze; skipped with the reason otherwise. This
//	      kernel has no device-mapper, so not dmsetup delay.
//	cpu+disk  both.
//
// The cluster carries a trickle of work (one 1-step procedure every
// BATON_SOAK_PERIOD, default 2s; 0: none) so that the disk stalls meet
// Raft log writes, as a cluster in use would. BATON_SOAK_TLS=0 runs it in
// plaintext, for comparison; BATON_SOAK_KILLS (default 3, 1 in the short run) is the number of
// failovers measured at the end. Any BATON_RAFT_* variable given to the
// test (e.g. BATON_RAFT_MULTIPLIER=2) is passed on to the agents, as is
// BATON_SOAK_LOG_LEVEL (default info; debug shows every failed heartbeat).
//
// Elections are counted three ways: the term's rise over the soak (every
// election, won or not, raises it), the leader changes seen by polling
// every master's /status each 500 ms, and the agents' own log lines
// (raft's "entering candidate state", its lease step-down "failed to
// contact quorum of nodes, stepping down", and its followers'
// "heartbeat timeout reached").
func TestElectionSoak(t *testing.T) {
	dur := 20 * time.Second
	conds := []string{"idle"}
	if v := os.Getenv("BATON_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("BATON_SOAK=%q: want a duration, e.g. 10m", v)
		}
		dur = d
		conds = []string{"idle", "cpu", "disk"}
	} else if testing.Short() {
		t.Skip("election soak: set BATON_SOAK=10m to run it in full")
	}
	if v := os.Getenv("BATON_SOAK_CONDITIONS"); v != "" {
		conds = strings.Split(v, ",")
	}
	var rows []soakResult
	for _, cond := range conds {
		cond = strings.TrimSpace(cond)
		t.Run(cond, func(t *testing.T) {
			r := runSoak(t, cond, dur)
			rows = append(rows, r)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "election soak (%s a condition, 3 masters, TLS %v, Raft env %q):\n", dur, soakTLS(), raftEnv())
	fmt.Fprintf(&b, "  %-9s %8s %6s %8s %8s %8s %8s %10s  %s\n", "condition", "ran", "terms", "leaders", "lease", "hb-lost", "per10m", "procs", "failover (SIGKILL → first new procedure done)")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-9s %8s %6d %8d %8d %8d %8.1f %10s  %s\n", r.cond, r.ran.Round(time.Second), r.terms, r.leaderChanges, r.leaseStepDowns, r.hbTimeouts,
			float64(r.terms)*float64(10*time.Minute)/float64(r.ran), fmt.Sprintf("%d/%d", r.procsOK, r.procs), r.failoverText())
	}
	t.Log(b.String())
}

type soakResult struct {
	cond                     string
	ran                      time.Duration
	terms                    uint64 // the term's rise
	leaderChanges            int    // seen by polling
	leaseStepDowns           int    // "failed to contact quorum", all masters
	hbTimeouts               int    // followers' "heartbeat timeout reached"
	candidates               int    // "entering candidate state"
	procs, procsOK, procsErr int64
	failovers                []time.Duration
}

func (r soakResult) failoverText() string {
	if len(r.failovers) == 0 {
		return "-"
	}
	p50, _, mx := percentiles(r.failovers)
	var each []string
	for _, d := range r.failovers {
		each = append(each, strconv.FormatInt(d.Milliseconds(), 10))
	}
	return fmt.Sprintf("p50 %v max %v (%s ms)", p50, mx, strings.Join(each, ", "))
}

func soakTLS() bool { return os.Getenv("BATON_SOAK_TLS") != "0" }

// raftEnv is the BATON_RAFT_* part of the test's environment.
func raftEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BATON_RAFT_") {
			env = append(env, kv)
		}
	}
	return env
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

func runSoak(t *testing.T, cond string, dur time.Duration) soakResult {
	r := soakResult{cond: cond}
	cpu, disk := false, false
	for _, c := range strings.Split(cond, "+") {
		switch c {
		case "idle":
		case "cpu":
			cpu = true
		case "disk":
			disk = true
		default:
			t.Fatalf("condition %q: want idle, cpu, disk or cpu+disk", cond)
		}
	}
	ids := []string{"n1", "n2", "n3"}
	var mounts []string
	dirs := map[string]string{}
	if disk {
		mounts = freezableDisks(t, ids)
		for i, id := range ids {
			dirs[id] = filepath.Join(mounts[i], "data")
		}
	}
	level := os.Getenv("BATON_SOAK_LOG_LEVEL")
	if level == "" {
		level = "info"
	}
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, TLS: soakTLS(), DataDirs: dirs, LogLevel: level, Env: raftEnv()})
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	c.WaitLeader(ctx)

	// The host's condition, from now until the soak ends.
	soakCtx, stopSoak := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopSoak(); bg.Wait() }()
	if cpu {
		n := runtime.NumCPU() * 4
		if v := os.Getenv("BATON_SOAK_CPU"); v != "" {
			if n, _ = strconv.Atoi(v); n < 1 {
				t.Fatalf("BATON_SOAK_CPU=%q: want a number of busy loops", v)
			}
		}
		busyLoops(t, soakCtx, n)
	}
	if disk {
		every := envDuration(t, "BATON_SOAK_STALL_EVERY", 5*time.Second)
		stall := envDuration(t, "BATON_SOAK_STALL", time.Second)
		bg.Add(1)
		go func() {
			defer bg.Done()
			stallDisks(t, soakCtx, mounts, every, stall)
		}()
	}
	// The trickle of work.
	period := envDuration(t, "BATON_SOAK_PERIOD", 2*time.Second)
	if period > 0 {
		cl := c.NewClient(client.WithCallTimeout(10 * time.Second))
		bg.Add(1)
		go func() {
			defer bg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-soakCtx.Done():
					return
				case <-tick.C:
				}
				atomic.AddInt64(&r.procs, 1)
				id, _, err := submitRetrying(soakCtx, cl, "sleep", map[string]string{"steps": "1", "delay": "1ms"}, fmt.Sprintf("soak-%s-%d", cond, i))
				if err == nil {
					var st string
					st, _, _, err = waitTerminal(soakCtx, cl, id)
					if err == nil && st == "SUCCESS" {
						atomic.AddInt64(&r.procsOK, 1)
						continue
					}
				}
				if soakCtx.Err() == nil {
					atomic.AddInt64(&r.procsErr, 1)
					t.Logf("trickle procedure %d: %v", i, err)
				}
			}
		}()
	}

	// Watch the terms and leaders.
	logOff := map[string]int{}
	for _, id := range ids {
		logOff[id] = len(c.CurrentLog(id))
	}
	firstTerm, lastTerm := uint64(0), uint64(0)
	lastLeader := ""
	start := time.Now()
	poll := time.NewTicker(500 * time.Millisecond)
	for time.Since(start) < dur {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-poll.C:
		}
		for _, id := range ids {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, id)
			scancel()
			if err != nil {
				continue
			}
			if firstTerm == 0 {
				firstTerm = st.Term
			}
			lastTerm = max(lastTerm, st.Term)
			if st.State == "Leader" && st.ID != lastLeader {
				if lastLeader != "" {
					r.leaderChanges++
					t.Logf("%6.1fs: leader %s → %s (term %d)", time.Since(start).Seconds(), lastLeader, st.ID, st.Term)
				}
				lastLeader = st.ID
			}
		}
	}
	poll.Stop()
	r.ran = time.Since(start)
	stopSoak()
	bg.Wait()
	if lastTerm > firstTerm {
		r.terms = lastTerm - firstTerm
	}
	for _, id := range ids {
		log := c.CurrentLog(id)
		if logOff[id] <= len(log) {
			log = log[logOff[id]:]
		}
		r.leaseStepDowns += strings.Count(log, "failed to contact quorum of nodes, stepping down")
		r.hbTimeouts += strings.Count(log, "heartbeat timeout reached")
		r.candidates += strings.Count(log, "entering candidate state")
		// What led to each lost contact, as the agent saw it.
		shown := 0
		for _, l := range strings.Split(log, "\n") {
			if shown < 40 && soakEvidence(l) {
				t.Logf("%s: %s", id, l)
				shown++
			}
		}
	}
	t.Logf("%s: %d terms, %d leader changes, %d lease step-downs, %d heartbeat timeouts, %d candidacies in %v; trickle %d/%d done (%d failed)",
		cond, r.terms, r.leaderChanges, r.leaseStepDowns, r.hbTimeouts, r.candidates, r.ran.Round(time.Second), r.procsOK, r.procs, r.procsErr)

	// Failover on this host: the condition is off (a stalled disk would
	// measure the stall), the cluster as it was left.
	kills := 1 // the short run checks the measure works
	if os.Getenv("BATON_SOAK") != "" {
		kills = 3
	}
	if v := os.Getenv("BATON_SOAK_KILLS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	cl := c.NewClient(client.WithCallTimeout(5*time.Second), client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	for k := range kills {
		leader := c.WaitLeader(ctx)
		t0 := time.Now()
		c.Kill(leader)
		id, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "1", "delay": "1ms"}, fmt.Sprintf("failover-%s-%d", cond, k))
		if err != nil {
			t.Fatalf("failover %d: %v", k, err)
		}
		if st, _, _, err := waitTerminal(ctx, cl, id); err != nil || st != "SUCCESS" {
			t.Fatalf("failover %d: procedure %d %s: %v", k, id, st, err)
		}
		d := time.Since(t0)
		r.failovers = append(r.failovers, d)
		t.Logf("failover %d: killed %s, first new procedure done after %v", k, leader, d.Round(time.Millisecond))
		c.Restart(leader)
		if _, err := c.WaitUp(ctx, leader); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// busyLoops starts n shell busy loops until ctx ends: other work on the
// host, in processes of their own as another developer's would be.
func busyLoops(t *testing.T, ctx context.Context, n int) {
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("busy loop: %v", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() { _ = cmd.Process.Kill(); <-done }
		t.Cleanup(stop)
		go func() {
			select {
			case <-ctx.Done():
				stop()
			case <-done:
			}
		}()
	}
}

// freezableDisks gives each id an ext4 file system of its own on a loop
// device, which fsfreeze can stall; it skips the test when the host
// cannot. The teardown thaws, unmounts and detaches them.
func freezableDisks(t *testing.T, ids []string) []string {
	if os.Geteuid() != 0 {
		t.Skip("the disk condition mounts loop devices and freezes them: run as root")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "fsfreeze"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the disk condition needs %s", tool)
		}
	}
	base := t.TempDir()
	var mounts []string
	for _, id := range ids {
		img := filepath.Join(base, id+".img")
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(512 << 20) // sparse
		f.Close()
		out, err := exec.Command("losetup", "-f", "--show", img).Output()
		if err != nil {
			t.Skipf("no loop device (%v)", err)
		}
		loop := strings.TrimSpace(string(out))
		mp := filepath.Join(base, id)
		t.Cleanup(func() {
			_ = exec.Command("fsfreeze", "-u", mp).Run()
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			_ = exec.Command("losetup", "-d", loop).Run()
		})
		if err := runCmd(t, "mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(loop, mp, "ext4", 0, ""); err != nil {
			t.Skipf("cannot mount %s (%v): needs CAP_SYS_ADMIN", loop, err)
		}
		mounts = append(mounts, mp)
	}
	return mounts
}

// stallDisks freezes every mount for stall, every every, until ctx ends,
// and leaves them thawed.
func stallDisks(t *testing.T, ctx context.Context, mounts []string, every, stall time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, m := range mounts {
			if err := runCmd(t, "fsfreeze", "-f", m); err != nil {
				t.Errorf("%v", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(stall):
		}
		for _, m := range mounts {
			if err := runCmd(t, "fsfreeze", "-u", m); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
}

// soakEvidence says whether an agent's log line tells of lost contact.
func soakEvidence(l string) bool {
	for _, k := range []string{"failed to contact", "heartbeat timeout reached", "failed to heartbeat", "entering candidate state",
		"pre-vote", "failed to appendEntries", "failed to pipeline", "entering leader state", "lost leadership", "transferring leadership"} {
		if strings.Contains(l, k) {
			return true
		}
	}
	return false
}
