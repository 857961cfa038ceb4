package upgrade

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/chaos"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// upgradeConfig sizes one run.
type upgradeConfig struct {
	regions int  // the big table's, created while the upgrade starts
	faults  bool // a leader kill or pause after each upgrade step
	workers int  // namespace clients (porcupine's history)
	// tls runs every channel with mutual TLS and access control enforced
	// (harness.Options.TLS), and upgrades the masters before the region
	// servers, as docs/upgrades.md says to: a current region server
	// refuses clients while a 0.1.0 master leads.
	tls bool
}

func config() upgradeConfig {
	if os.Getenv("BATON_UPGRADE_LONG") != "" {
		return upgradeConfig{regions: 2000, faults: true, workers: 4}
	}
	return upgradeConfig{regions: 300, workers: 2}
}

// release builds r's binary, or skips the test when the repository does
// not hold r's commit (a shallow clone) and BATON_REQUIRE_RELEASES is not
// set.
func release(t *testing.T, r harness.Release) harness.Binary {
	t.Helper()
	b, took, err := harness.BuildRelease(r)
	if errors.Is(err, harness.ErrNoHistory) && os.Getenv("BATON_REQUIRE_RELEASES") == "" {
		t.Skipf("upgrade from %s not tested: %v", r.Version, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade: %s built from %s (%v, cached for the run)", r.Version, r.Commit[:12], took.Round(time.Second))
	return b
}

// TestRollingUpgrade upgrades a cluster of each release, every process one
// by one, to the current build with work in flight (see the package doc).
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("upgrade: builds a release and runs two clusters' worth of restarts; not in -short")
	}
	for _, r := range harness.Releases {
		t.Run(r.Version, func(t *testing.T) { rollingUpgrade(t, release(t, r), config()) })
		t.Run(r.Version+"+tls", func(t *testing.T) {
			cfg := config()
			cfg.tls = true
			rollingUpgrade(t, release(t, r), cfg)
		})
	}
}

// TestRollingDowngrade puts one master of each release on the current
// build, lets it lead, and puts it back on the release, with procedures in
// flight throughout: they finish, exactly once. This is the downgrade the
// policy allows while the cluster version has not been raised.
func TestRollingDowngrade(t *testing.T) {
	if testing.Short() {
		t.Skip("upgrade: builds a release; not in -short")
	}
	for _, r := range harness.Releases {
		t.Run(r.Version, func(t *testing.T) { rollingDowngrade(t, release(t, r)) })
	}
}

// run is one cluster's upgrade or downgrade, with what the checks need.
type run struct {
	t   *testing.T
	c   *harness.Cluster
	cl  *client.Client
	cur harness.Binary

	curVersion string   // what the current build reports (baton version)
	cliTLS     []string // the CLI's --tls-* flags, none without TLS

	mu     sync.Mutex
	acked  map[uint64]string // every procedure the cluster acknowledged: what it is
	sleeps map[uint64]int    // sleep procedures: their steps
	fanout map[uint64][2]int // fanout procedures: their children, and each child's steps
	done   map[uint64]time.Time

	ops atomic.Int64 // client calls answered during the run
}

func newRun(t *testing.T, old, cur harness.Binary, regionServers int, tls bool) (*run, context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	bins := map[string]harness.Binary{}
	for i := range 3 {
		bins[fmt.Sprintf("n%d", i+1)] = old
	}
	for i := range regionServers {
		bins[fmt.Sprintf("rs%d", i+1)] = old
	}
	// Access control as the harness runs it: none without TLS; with it,
	// enforced, the harness's client the admin.
	c := harness.New(t, harness.Options{Binary: cur.Path, Nodes: 3, Binaries: bins, TLS: tls})
	var cliTLS []string
	if tls {
		f, err := c.PKI().Issue(security.Identity{Role: security.RoleClient, ID: "harness"}, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cliTLS = []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
	}
	c.WaitLeader(ctx)
	if regionServers > 0 {
		c.StartRegionServers(regionServers, harness.RSOptions{OpLatency: 20 * time.Millisecond})
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		if _, err := c.WaitRegionServers(wctx); err != nil {
			t.Fatal(err)
		}
		wcancel()
	}
	return &run{t: t, c: c, cl: c.Client(), cur: cur, curVersion: currentVersion(t), cliTLS: cliTLS, acked: map[uint64]string{}, sleeps: map[uint64]int{},
		fanout: map[uint64][2]int{}, done: map[uint64]time.Time{}}, ctx
}

func (r *run) ack(id uint64, what string) {
	r.mu.Lock()
	r.acked[id] = what
	r.mu.Unlock()
}

// submit submits with one nonce until the cluster acknowledges it (a
// retry across a restart is the same submission), and records the id.
func (r *run) submit(ctx context.Context, what string, f func(ctx context.Context, nonce string) (uint64, error)) (uint64, error) {
	nonce := client.NewNonce()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := f(cctx, nonce)
		cancel()
		if err == nil {
			r.ops.Add(1)
			r.ack(id, what)
			return id, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s not acknowledged: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *run) sleep(ctx context.Context, steps int, delay time.Duration) (uint64, error) {
	args := map[string]string{"steps": strconv.Itoa(steps), "delay": delay.String()}
	id, err := r.submit(ctx, fmt.Sprintf("sleep %d×%v", steps, delay), func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.Submit(ctx, "sleep", args, nonce, "upgrade", 0)
	})
	if err == nil {
		r.mu.Lock()
		r.sleeps[id] = steps
		r.mu.Unlock()
	}
	return id, err
}

// sleepLoad submits short sleeps until run ends: submissions that cross
// every restart. The one in flight when run ends is still waited for
// (under ctx, with its nonce): cut there, it may have committed all the
// same, unrecorded, and checkEffects would take its effects for a fanout
// child's.
func (r *run) sleepLoad(run context.Context, ctx context.Context) {
	for run.Err() == nil {
		if _, err := r.sleep(ctx, 4, 100*time.Millisecond); err != nil {
			r.t.Errorf("upgrade: %v", err)
			return
		}
		select {
		case <-run.Done():
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// restartMaster stops master id with SIGTERM (a leader transfers its
// leadership first), starts it on b, and waits until it is caught up: it
// knows a leader and has applied everything the leader had applied when it
// came back.
func (r *run) restartMaster(ctx context.Context, id string, b harness.Binary) {
	r.t.Helper()
	if code := r.c.Term(id, 60*time.Second); code != 0 {
		r.t.Fatalf("upgrade: %s exited %d on SIGTERM", id, code)
	}
	r.c.RestartWith(id, b)
	r.caughtUp(ctx, id)
}

func (r *run) caughtUp(ctx context.Context, id string) {
	r.t.Helper()
	if _, err := r.c.WaitUp(ctx, id); err != nil {
		r.t.Fatalf("upgrade: %v\n%s", err, tail(r.c.CurrentLog(id)))
	}
	leader := r.c.WaitLeader(ctx)
	lst, err := r.c.Status(ctx, leader)
	if err != nil {
		r.t.Fatalf("upgrade: status of leader %s: %v", leader, err)
	}
	for {
		st, err := r.c.Status(ctx, id)
		if err == nil && st.FSMIndex >= lst.FSMIndex && st.LeaderID != "" {
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("upgrade: %s did not catch up to index %d: %v (last %+v)", id, lst.FSMIndex, ctx.Err(), st)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *run) restartRS(ctx context.Context, id string, b harness.Binary) {
	r.t.Helper()
	if r.c.RegionServer(id).Running() {
		r.c.TermRS(id, 30*time.Second)
	}
	r.c.RestartRSWith(id, b)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := r.c.WaitRegionServers(wctx); err != nil {
		r.t.Fatalf("upgrade: %s on %s: %v\n%s", id, b, err, tail(r.c.RSLog(id)))
	}
}

// crashRecovery waits until the leader runs a ServerCrash procedure (the
// recovery of a killed region server, once its lease expires) and returns
// its id.
func (r *run) crashRecovery(ctx context.Context) uint64 {
	r.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(wctx, 5*time.Second)
		ps, err := r.cl.ListAll(cctx, client.ListOptions{Type: "ServerCrash"})
		ccancel()
		for _, p := range ps {
			if !client.Terminal(p.GetState()) {
				r.ack(p.GetId(), "crash recovery (ServerCrash)")
				return p.GetId()
			}
		}
		select {
		case <-wctx.Done():
			r.t.Fatalf("upgrade: no crash recovery started: %v (last: %v, %d ServerCrash listed)", wctx.Err(), err, len(ps))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// progress waits until the cluster as it is now serves: a new sleep
// submitted and finished, and a few more namespace operations answered.
func (r *run) progress(ctx context.Context, hist *chaos.History, after string) {
	r.t.Helper()
	before, _, _ := hist.Counts()
	id, err := r.sleep(ctx, 2, 50*time.Millisecond)
	if err != nil {
		r.t.Fatalf("upgrade: after %s: %v", after, err)
	}
	r.waitAll(ctx, []uint64{id}, time.Minute)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if ok, _, _ := hist.Counts(); ok >= before+5 {
			return
		}
		select {
		case <-wctx.Done():
			r.t.Fatalf("upgrade: after %s the namespace clients made no progress: %v", after, wctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fault kills or pauses the leader (the long run, between upgrade steps)
// and waits for a ready leader again.
func (r *run) fault(ctx context.Context, i int) string {
	r.t.Helper()
	leader := r.c.WaitLeader(ctx)
	if i%2 == 0 {
		r.c.Kill(leader)
		r.c.Restart(leader) // on whatever binary it ran
		r.caughtUp(ctx, leader)
		return "leader kill " + leader
	}
	r.c.Pause(leader)
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	<-hctx.Done() // the pause's length: a frozen machine, not a settle wait
	cancel()
	r.c.Resume(leader)
	r.caughtUp(ctx, leader)
	return "leader pause " + leader
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

func rollingUpgrade(t *testing.T, old harness.Binary, cfg upgradeConfig) {
	began := time.Now()
	cur := harness.Binary{Path: nodeBin}
	r, ctx := newRun(t, old, cur, 3, cfg.tls)
	c := r.c

	// Work in flight on the old version.
	nsID, err := r.submit(ctx, "create namespace up", func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.CreateNamespace(ctx, "up", nonce)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.waitAll(ctx, []uint64{nsID}, time.Minute)
	// A small table first, so that the region server killed below hosts
	// regions its crash recovery must move.
	preID, err := r.submit(ctx, "create table up:pre (30 regions)", func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.CreateTable(ctx, "up", "pre", 30, nonce)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.waitAll(ctx, []uint64{preID}, 2*time.Minute)
	// A region server's crash recovery under way: the upgrade starts once
	// the leader runs it (rs3 comes back, on the current build, in the
	// upgrade's third step).
	c.KillRS("rs3")
	crashID := r.crashRecovery(ctx)
	inflight := []uint64{crashID}
	for i := range 6 {
		// From about 10 s to a minute: some end mid-upgrade, some after it.
		id, err := r.sleep(ctx, 20+i*20, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		inflight = append(inflight, id)
	}
	holder, waiter := r.lockPair(ctx)
	inflight = append(inflight, holder.id, waiter.id)
	balanceID, err := r.submit(ctx, "balance", func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.Balance(ctx, nonce)
	})
	if err != nil {
		t.Fatal(err)
	}
	inflight = append(inflight, balanceID)
	tableID, err := r.submit(ctx, fmt.Sprintf("create table up:big (%d regions)", cfg.regions), func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.CreateTable(ctx, "up", "big", cfg.regions, nonce)
	})
	if err != nil {
		t.Fatal(err)
	}
	inflight = append(inflight, tableID)

	// Load and sampling from here to the end of the upgrade.
	hist := chaos.NewHistory([]string{"ns-a", "ns-b", "ns-c"})
	sampler := chaos.NewSampler(c, time.Second)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	chaos.StartWorkers(runCtx, ctx, &wg, c, hist, cfg.workers, 1, r.ack, func(uint64) {})
	wg.Add(1)
	go func() { defer wg.Done(); r.sleepLoad(runCtx, ctx) }()
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); sampler.Run(runCtx, 200*time.Millisecond) }()

	// The upgrade: region servers in any order (rs3 comes back from its
	// crash on the current build), then the follower masters, the leader
	// last; SIGTERM makes it hand its leadership over first.
	upgradeStart := time.Now()
	watch := r.watchFormat(ctx)
	// Before anything moves, every member runs the release: upgrade-check
	// shows each as 0.1.0 (its answer has no version), none too old, and
	// the leader not to be restarted before the others.
	first := r.upgradeCheck(ctx, c.WaitLeader(ctx), false, "leader")
	checks := []string{fmt.Sprintf("at the start, answered by %s (cluster_format %d): leader %s not safe (leader last)",
		first.AnsweredBy, first.ClusterFormat, first.LeaderID)}
	var steps, faults []string
	var lastRestart time.Time
	leaderLast := 1 // checked not safe, the leader being last
	step := func(what string) {
		steps = append(steps, fmt.Sprintf("%s at %v", what, time.Since(upgradeStart).Round(100*time.Millisecond)))
		if cfg.faults {
			faults = append(faults, r.fault(ctx, len(faults)))
		}
		r.progress(ctx, hist, what)
	}
	upgradeRS := func() {
		for _, id := range []string{"rs1", "rs2", "rs3"} {
			r.restartRS(ctx, id, cur)
			step(id + " on current")
		}
	}
	if !cfg.tls {
		upgradeRS()
	}
	// Followers first, the leader last. Asked again at each step: a
	// fault may have moved the leadership onto an upgraded member.
	for {
		leader := c.WaitLeader(ctx)
		next, role := "", "follower"
		for _, n := range c.Nodes {
			if n.ID != leader && c.BinaryOf(n.ID).Release != "" {
				next = n.ID
				break
			}
		}
		if next == "" {
			if c.BinaryOf(leader).Release == "" {
				break
			}
			next, role = leader, "leader"
		}
		// The current build's upgrade-check, as the policy runs it: the
		// next member is safe to restart; while a follower is next, the
		// leader is not (it goes last).
		if role == "follower" {
			r.upgradeCheck(ctx, leader, false, "leader")
			leaderLast++
		}
		doc := r.upgradeCheck(ctx, next, true)
		checks = append(checks, fmt.Sprintf("%s (%s) safe, answered by %s (cluster_format %d)", next, role, doc.AnsweredBy, doc.ClusterFormat))
		lastRestart = time.Now()
		r.restartMaster(ctx, next, cur)
		r.showsCurrent(ctx, next)
		step(fmt.Sprintf("%s (%s) on current", next, role))
	}
	if cfg.tls {
		upgradeRS()
	}
	upgradeEnd := time.Now()
	for _, n := range c.Nodes {
		if b := c.BinaryOf(n.ID); b.Release != "" {
			t.Fatalf("upgrade: %s still runs %s", n.ID, b)
		}
	}

	// The cluster version (issue 30, item 2): every member now runs the
	// current build, and the leader raises it to 2, which no sample took
	// while a master ran the release. A format-2 write then works: a
	// finished fanout keeps its children's summaries. A member put back on
	// 0.1.0 now would not be refused (0.1.0 predates the cluster version:
	// docs/upgrades.md); the refusal of a binary that knows it is
	// cluster/admin's TestStartRefusedBelowTheClusterVersion.
	raisedAt := r.raised(ctx)
	formatSamples, formatAfter, _, seenAt := watch.end(t)
	if !seenAt.IsZero() && seenAt.Before(raisedAt) {
		raisedAt = seenAt
	}
	kept, root := r.summaries(ctx, true)
	submitters := "no submitters without access control"
	if cfg.tls {
		// The other format-2 write, seen only with access control: a
		// procedure's record carries its submitter (field 114) from the
		// raise on; one submitted before it stays no one's.
		before, err := r.cl.Get(ctx, inflight[1])
		if err != nil || before.GetSubmittedBy() != "" || !strings.Contains(root.GetSubmittedBy(), "harness") {
			t.Errorf("upgrade: submitters: %q before the raise (%v), %q after it; want none, then the harness's client", before.GetSubmittedBy(), err, root.GetSubmittedBy())
		}
		submitters = fmt.Sprintf("submitter %q after the raise, none on a sleep submitted before it", root.GetSubmittedBy())
	}

	// The load goes on a little on the upgraded cluster, then stops.
	more, _ := r.sleep(ctx, 3, 100*time.Millisecond)
	r.waitAll(ctx, []uint64{more}, time.Minute)
	stopRun()
	<-samplerDone
	wg.Wait()

	r.release(ctx, holder, waiter)
	r.waitAll(ctx, r.ackedIDs(), 5*time.Minute)
	r.checkEffects(ctx)
	problems := r.endState(ctx, cfg.regions)
	res, err := hist.Check(2*time.Minute, t.TempDir(), "namespaces")
	if err != nil {
		t.Error(err)
	}
	samples, doubles, reports := sampler.Result()
	crossedAll, crossedSome := 0, 0
	var fates []string
	for _, id := range inflight {
		fate := "finished before the upgrade"
		if d := r.finished(id); d.After(upgradeEnd) {
			crossedAll++
			fate = "crossed it"
		} else if d.After(upgradeStart) {
			crossedSome++
			fate = "finished during it"
		}
		fates = append(fates, fmt.Sprintf("%s: %s", r.acked[id], fate))
	}
	okOps, failedOps, unknownOps := hist.Counts()
	var b strings.Builder
	mode := "without TLS"
	if cfg.tls {
		mode = "with TLS and access control, masters first"
	}
	fmt.Fprintf(&b, "\n=== rolling upgrade %s → current, %s ===\n", old.Release, mode)
	fmt.Fprintf(&b, "  steps: %s\n", strings.Join(steps, "; "))
	if len(faults) > 0 {
		fmt.Fprintf(&b, "  faults: %s\n", strings.Join(faults, "; "))
	}
	fmt.Fprintf(&b, "  in flight at the start: %d procedures (rs3's crash recovery, 6 sleeps, lock + waiter, balance, create of %d regions); %d crossed the whole upgrade, %d finished during it\n",
		len(inflight), cfg.regions, crossedAll, crossedSome)
	fmt.Fprintf(&b, "    (%s)\n", strings.Join(fates, "; "))
	fmt.Fprintf(&b, "  acknowledged procedures: %d (%d by the sleep and table clients, the rest namespace operations), all finished\n", len(r.ackedIDs()), r.ops.Load())
	fmt.Fprintf(&b, "  namespace ops: ok %d, failed %d, unknown %d (%s); porcupine: %v over %d per-key ops\n", okOps, failedOps, unknownOps, hist.Detail(), res.Result, res.Ops)
	fmt.Fprintf(&b, "  placement samples: %d, doubles: %d\n", samples, doubles)
	fmt.Fprintf(&b, "  upgrade-check: %s; the leader not safe (leader last) %d times, at the start and before each follower\n", strings.Join(checks, "; "), leaderLast)
	fmt.Fprintf(&b, "  cluster version: 1 in all %d samples while a master ran %s (%d after); 2 on every master within %v of the last master's restart, and 2 everywhere (state, /status, metric, reports); %d children of a fanout after it kept as summaries; %s\n",
		formatSamples, old.Release, formatAfter, raisedAt.Sub(lastRestart).Round(100*time.Millisecond), kept, submitters)
	fmt.Fprintf(&b, "  upgrade took %v; whole run %v\n", upgradeEnd.Sub(upgradeStart).Round(100*time.Millisecond), time.Since(began).Round(time.Second))
	t.Log(b.String())

	if res.Result == porcupine.Illegal {
		t.Errorf("NOT LINEARIZABLE across the upgrade: %d stale reads, e.g. %s", res.Stale, strings.Join(res.Samples, "; "))
	}
	if doubles > 0 {
		t.Errorf("a region open on two servers at once during the upgrade:\n  %s", strings.Join(reports, "\n  "))
	}
	if len(problems) > 0 {
		t.Errorf("end state after the upgrade:\n  %s", strings.Join(problems, "\n  "))
	}
	if crossedAll == 0 {
		t.Errorf("no procedure in flight at the start was still running at the end of the upgrade: the run proves less than it says")
	}
}

// lock is one lock procedure of the exclusive pair.
type lock struct {
	id    uint64
	state string
}

// lockPair takes an exclusive namespace lock, heartbeated until release,
// and queues a second exclusive one behind it.
func (r *run) lockPair(ctx context.Context) (holder, waiter *lock) {
	r.t.Helper()
	take := func(who string) *lock {
		var resp *adminpb.LockResponse
		id, err := r.submit(ctx, "exclusive lock of upgrade-lock by "+who, func(ctx context.Context, nonce string) (uint64, error) {
			var err error
			resp, err = r.cl.AcquireLock(ctx, client.LockNamespace, []string{"upgrade-lock"}, true, who, "upgrade test", nonce)
			return resp.GetLockId(), err
		})
		if err != nil {
			r.t.Fatal(err)
		}
		return &lock{id: id, state: resp.GetState()}
	}
	holder = take("holder")
	waiter = take("waiter")
	if holder.state != client.LockAcquired || waiter.state != client.LockWaiting {
		r.t.Fatalf("upgrade: locks %s and %s, want ACQUIRED and WAITING", holder.state, waiter.state)
	}
	for _, l := range []*lock{holder, waiter} {
		go r.heartbeat(ctx, l.id)
	}
	return holder, waiter
}

// heartbeat renews lock id's lease until it is released or expires, or
// ctx ends; through restarts the client retries on another master.
func (r *run) heartbeat(ctx context.Context, id uint64) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := r.cl.LockHeartbeat(cctx, id)
		cancel()
		if err == nil && !client.LockHeld(resp.GetState()) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// release lets the holder go; the waiter must then be granted the lock
// (its lease kept by heartbeats all along), and is released in turn.
func (r *run) release(ctx context.Context, holder, waiter *lock) {
	r.t.Helper()
	rel := func(l *lock) string {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := r.cl.ReleaseLock(cctx, l.id)
			cancel()
			if err == nil {
				return resp.GetState()
			}
			if ctx.Err() != nil {
				r.t.Fatalf("upgrade: release lock %d: %v", l.id, err)
			}
		}
	}
	if st := rel(holder); st != client.LockReleased {
		r.t.Errorf("upgrade: the held lock %d ended %s, want RELEASED (its heartbeats crossed the upgrade)", holder.id, st)
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := r.cl.LockHeartbeat(cctx, waiter.id)
		cancel()
		if err == nil && resp.GetState() == client.LockAcquired {
			break
		}
		if err == nil && !client.LockHeld(resp.GetState()) {
			r.t.Fatalf("upgrade: the waiting lock %d ended %s before it was granted", waiter.id, resp.GetState())
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("upgrade: the waiting lock %d was never granted: %v", waiter.id, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if st := rel(waiter); st != client.LockReleased {
		r.t.Errorf("upgrade: the waiting lock %d ended %s, want RELEASED", waiter.id, st)
	}
}

func (r *run) ackedIDs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]uint64, 0, len(r.acked))
	for id := range r.acked {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (r *run) finished(id uint64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done[id]
}

// waitAll waits until every procedure of ids is terminal (at most within
// in all), and records when each finished. A rolled-back one is an error
// unless it is a namespace operation that found the namespace there (or
// not), which the history accounts for.
func (r *run) waitAll(ctx context.Context, ids []uint64, within time.Duration) {
	r.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for _, id := range ids {
		if !r.finished(id).IsZero() {
			continue
		}
		var p *adminpb.Procedure
		for {
			var err error
			p, err = r.cl.Wait(wctx, id)
			if err == nil && client.Terminal(p.GetState()) {
				break
			}
			if wctx.Err() != nil {
				r.t.Fatalf("upgrade: procedure %d (%s) not finished: %v (last state %s, waiting for %q)",
					id, r.acked[id], errors.Join(err, wctx.Err()), p.GetState(), p.GetWaitingFor())
			}
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		r.mu.Lock()
		r.done[id] = time.UnixMilli(p.GetFinishedUnixMs())
		what := r.acked[id]
		r.mu.Unlock()
		if p.GetState() != client.StateSuccess && !strings.HasPrefix(what, "namespace ") {
			r.t.Errorf("upgrade: procedure %d (%s) ended %s: %s", id, what, p.GetState(), p.GetError())
		}
	}
}

// checkEffects reads each sleep's and fanout's effects (diag.EffectKey)
// from every master's replicated state: each step applied exactly once,
// on every master alike.
func (r *run) checkEffects(ctx context.Context) {
	r.t.Helper()
	if _, err := r.c.Converge(ctx, 300*time.Millisecond); err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	sleeps, fanouts := maps.Clone(r.sleeps), maps.Clone(r.fanout)
	r.mu.Unlock()
	check := func(id uint64, steps int) {
		want := map[string]string{}
		for s := range steps {
			want[fmt.Sprintf("effects/%d/%d", id, s)] = "1"
		}
		for _, n := range r.c.Nodes {
			got, err := r.c.Domain(ctx, n.ID, fmt.Sprintf("effects/%d/", id))
			if err != nil {
				r.t.Fatalf("upgrade: effects of %d on %s: %v", id, n.ID, err)
			}
			if !maps.Equal(got, want) {
				r.t.Errorf("upgrade: procedure %d (%s) on %s: effects %v, want each of its %d steps once", id, r.acked[id], n.ID, got, steps)
			}
		}
	}
	for id, steps := range sleeps {
		check(id, steps)
	}
	if len(fanouts) == 0 {
		return
	}
	// The children: every other procedure with effects is one, a sleep of
	// the fanout's steps, and there are exactly as many as asked for (a
	// re-spawn across a restart would add some).
	wantChildren := 0
	for id, f := range fanouts {
		check(id, 2) // spawn, then collect
		wantChildren += f[0]
	}
	all, err := r.c.Domain(ctx, r.c.Nodes[0].ID, "effects/")
	if err != nil {
		r.t.Fatalf("upgrade: effects: %v", err)
	}
	children := map[string]map[string]string{}
	for k, v := range all {
		rest, _ := strings.CutPrefix(k, "effects/")
		id, step, _ := strings.Cut(rest, "/")
		n, _ := strconv.ParseUint(id, 10, 64)
		if _, sleep := sleeps[n]; sleep {
			continue
		}
		if _, fanout := fanouts[n]; fanout {
			continue
		}
		if children[id] == nil {
			children[id] = map[string]string{}
		}
		children[id][step] = v
	}
	if len(children) != wantChildren {
		r.t.Errorf("upgrade: %d fanout children have effects, want %d", len(children), wantChildren)
	}
	// A child is a sleep of its parent's steps; which fanout is its parent
	// the effects do not say, so it must match one of them.
	for id, effects := range children {
		matched := false
		for _, f := range fanouts {
			want := map[string]string{}
			for s := range f[1] {
				want[strconv.Itoa(s)] = "1"
			}
			matched = matched || maps.Equal(effects, want)
		}
		if !matched {
			r.t.Errorf("upgrade: fanout child %s: effects %v, want each of its steps once", id, effects)
		}
	}
}

// endState waits (a minute at most) for the settled placement: every
// region of every enabled table open on exactly one region server, none
// open twice, and the big table's want regions all there.
func (r *run) endState(ctx context.Context, want int) []string {
	var problems []string
	deadline := time.Now().Add(time.Minute)
	for {
		p, doubles, err := chaos.EndState(ctx, r.c, r.cl, nil)
		if err == nil && len(p) == 0 && len(doubles) == 0 {
			break
		}
		problems = append(append(p, doubles...), fmt.Sprint(err))
		if time.Now().After(deadline) {
			if len(problems) > 20 {
				problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
			}
			return problems
		}
		select {
		case <-ctx.Done():
			return append(problems, ctx.Err().Error())
		case <-time.After(500 * time.Millisecond):
		}
	}
	regions, err := r.cl.ListRegions(ctx, "up:big")
	if err != nil {
		return []string{err.Error()}
	}
	if len(regions) != want {
		return []string{fmt.Sprintf("table up:big has %d regions, want %d", len(regions), want)}
	}
	return nil
}

func (r *run) fanoutOf(ctx context.Context, children, steps int, delay time.Duration) (uint64, error) {
	args := map[string]string{"children": strconv.Itoa(children), "steps": strconv.Itoa(steps), "delay": delay.String()}
	id, err := r.submit(ctx, fmt.Sprintf("fanout %d×%d", children, steps), func(ctx context.Context, nonce string) (uint64, error) {
		return r.cl.Submit(ctx, "fanout", args, nonce, "upgrade", 0)
	})
	if err == nil {
		r.mu.Lock()
		r.fanout[id] = [2]int{children, steps}
		r.mu.Unlock()
	}
	return id, err
}

func rollingDowngrade(t *testing.T, old harness.Binary) {
	cur := harness.Binary{Path: nodeBin}
	// With TLS and access control, so that a procedure carries who
	// submitted it (record field 114) where the format allows it: the
	// current build must not write it while the cluster version is 1.
	r, ctx := newRun(t, old, cur, 0, true)
	c := r.c
	// Two masters run the release throughout: the cluster version must
	// stay 1, and nothing of format 2 be written.
	watch := r.watchFormat(ctx)
	var ids []uint64
	for i := range 4 {
		id, err := r.sleep(ctx, 20+i*15, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A fanout: its children's summaries are a record field the current
	// build writes and the release drops (procedure record field 113).
	fid, err := r.fanoutOf(ctx, 4, 30, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, fid)

	// One follower onto the current build; then make it the leader, so
	// that the current build runs the procedures for a while.
	leader := c.WaitLeader(ctx)
	up := c.Followers(leader)[0]
	r.restartMaster(ctx, up, cur)
	r.showsCurrent(ctx, up)
	for tries := 0; c.WaitLeader(ctx) != up; tries++ {
		if tries == 6 {
			t.Fatalf("downgrade: %s never became leader", up)
		}
		r.restartMaster(ctx, c.WaitLeader(ctx), old)
	}
	// Work the current build does alone: a sleep, and a fanout that it
	// finishes. At cluster version 1 its record keeps no summaries of
	// its children (the gate withholds field 113, which the release
	// would drop).
	mid, err := r.sleep(ctx, 10, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	short, err := r.fanoutOf(ctx, 3, 3, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, mid, short)
	r.waitAll(ctx, []uint64{mid, short}, time.Minute)
	if l := c.WaitLeader(ctx); l != up {
		t.Logf("downgrade: the leadership left %s (now %s) before its work finished", up, l)
	}
	r.childrenKept(ctx, short, false)
	// The other format-2 write: who submitted a procedure. The current
	// build leads, access control names the harness's client, and still
	// no record carries it.
	for _, id := range []uint64{mid, short} {
		p, err := r.cl.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if by := p.GetSubmittedBy(); by != "" {
			t.Errorf("downgrade: procedure %d, submitted to the current build at cluster version 1, records its submitter %q (field 114, format 2)", id, by)
		}
	}
	unfinished := 0
	for _, id := range ids {
		p, err := r.cl.Get(ctx, id)
		if err == nil && !client.Terminal(p.GetState()) {
			unfinished++
		}
	}
	// Back onto the release: it hands the leadership to a release member
	// as it stops.
	r.restartMaster(ctx, up, old)
	c.WaitLeader(ctx)
	r.waitAll(ctx, r.ackedIDs(), 3*time.Minute)
	// The release serves no --debug-endpoints flag, but serves the
	// endpoint anyway: the effects are read from every member.
	r.checkEffects(ctx)
	samples, _, highest, _ := watch.end(t)
	if highest != version.Format1 {
		t.Errorf("downgrade: the cluster version reached %d", highest)
	}
	if unfinished == 0 {
		t.Errorf("downgrade: nothing was in flight when %s went back to %s", up, old.Release)
	}
	if t.Failed() {
		return
	}
	t.Logf("downgrade %s → current → %s, with TLS and access control: %d procedures, %d still running when %s went back, all finished exactly once; cluster version 1 in all %d samples; the fanout the current build finished kept no child summaries (NOT_FOUND), and no procedure its submitter",
		old.Release, old.Release, len(r.ackedIDs()), unfinished, up, samples)
}
