package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// job is one procedure submitted by TestLeaderKillDuringProcedures.
type job struct {
	nonce    string
	typ      string
	args     map[string]string
	want     string // expected terminal state
	steps    int    // steps of a sleep, of each child of a fanout
	children int

	id       uint64 // acknowledged id
	attempts int    // submissions until acknowledged
	state    string
	finished int64
	errText  string
}

func makeJobs(n int) []*job {
	jobs := make([]*job, n)
	for i := range jobs {
		j := &job{nonce: fmt.Sprintf("lk-%03d", i)}
		switch i % 10 {
		case 0:
			j.typ, j.want, j.steps, j.children = "fanout", client.StateSuccess, 2, 3
			j.args = map[string]string{"children": "3", "steps": "2", "delay": "50ms"}
		case 5:
			j.typ, j.want = "fail", client.StateRolledBack
			j.args = map[string]string{"steps": "4", "fail_at": "2", "delay": "50ms"}
		default:
			j.typ, j.want, j.steps = "sleep", client.StateSuccess, 5
			j.args = map[string]string{"steps": "5", "delay": "50ms"}
		}
		jobs[i] = j
	}
	return jobs
}

// TestLeaderKillDuringProcedures submits 100 multi-step procedures (sleep,
// fanout, fail) with nonces from four clients while the leader is
// SIGKILLed at least five times (each killed node restarts a moment later,
// so a quorum always stands). It asserts that:
//   - every submission is acknowledged, and resubmitting its nonce returns
//     the same id (no procedure is started twice);
//   - the cluster holds exactly 100 root procedures;
//   - every procedure ends in its expected state (sleep and fanout SUCCESS,
//     fail ROLLEDBACK), and that terminal state is final: after one more
//     leader kill, state, result and finish time are unchanged;
//   - per /debug/domain on every node, each step's effect key
//     effects/<id>/<step> is "1" (applied exactly once), the nodes agree,
//     every sleep recorded its steps and the fanouts spawned exactly their
//     children (skipped while the agents lack /debug/domain).
func TestLeaderKillDuringProcedures(t *testing.T) {
	const (
		procs      = 100
		submitters = 4
		minKills   = 5
		maxKills   = 8
	)
	ctx, c, _ := leadingCluster(t, 3, 150*time.Second)

	jobs := makeJobs(procs)
	var (
		mu      sync.Mutex
		acked   int
		errs    errList
		subDone = make(chan struct{})
	)
	start := time.Now()

	var subs sync.WaitGroup
	for g := range submitters {
		cl := c.NewClient(client.WithCallTimeout(5*time.Second), client.WithAttemptTimeout(time.Second), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
		subs.Add(1)
		go func() {
			defer subs.Done()
			for i := g; i < procs; i += submitters {
				j := jobs[i]
				id, n, err := submitRetrying(ctx, cl, j.typ, j.args, j.nonce)
				if err != nil {
					errs.add(err)
					return
				}
				j.id, j.attempts = id, n
				mu.Lock()
				acked++
				mu.Unlock()
				// Paces the submissions, to spread them over the kills.
				select {
				case <-ctx.Done():
					errs.add(fmt.Errorf("submissions stopped after %s: %w", j.nonce, ctx.Err()))
					return
				case <-time.After(150 * time.Millisecond):
				}
			}
		}()
	}
	go func() { subs.Wait(); close(subDone) }()

	// The killer: SIGKILL whoever leads, restart it once another node
	// leads, wait until it is back (knows a leader) so the next kill
	// leaves a quorum.
	type kill struct {
		victim     string
		acked      int
		newLeader  string
		electionIn time.Duration
	}
	var kills []kill
	rng := rand.New(rand.NewPCG(1, 2))
	submitting := func() bool {
		select {
		case <-subDone:
			return false
		default:
			return true
		}
	}
	for len(kills) < minKills || (len(kills) < maxKills && submitting()) {
		if _, err := c.AwaitLeader(ctx); err != nil {
			t.Fatalf("after %d kills: %v", len(kills), err)
		}
		// Paces the kills: a random pause puts each one at a different
		// point of the submissions.
		leader := pauseThenLeader(t, ctx, c, time.Duration(250+rng.IntN(400))*time.Millisecond, len(kills))
		mu.Lock()
		k := kill{victim: leader, acked: acked}
		mu.Unlock()
		k.newLeader, k.electionIn = killLeaderAndAwait(t, ctx, c, leader)
		kills = append(kills, k)
		t.Logf("kill %d: %s (leader) with %d/%d acknowledged; %s ready after %v", len(kills), leader, k.acked, procs, k.newLeader, k.electionIn.Round(time.Millisecond))
		restartAndWait(t, ctx, c, leader)
	}
	awaitSubmissions(t, ctx, subDone)
	errs.failNow(t)
	midFlight := 0
	for _, k := range kills {
		if k.acked > 0 && k.acked < procs {
			midFlight++
		}
	}
	if midFlight < minKills {
		t.Errorf("only %d of %d kills happened while submissions were under way, want ≥ %d", midFlight, len(kills), minKills)
	}
	retried := 0
	for _, j := range jobs {
		if j.attempts > 1 {
			retried++
		}
	}
	t.Logf("%d procedures acknowledged in %v (%d needed more than one Submit call), %d leader kills", procs, time.Since(start).Round(time.Millisecond), retried, len(kills))

	cl := c.Client()
	// Every acknowledged procedure reaches its expected terminal state.
	for _, j := range jobs {
		state, fin, errText, err := terminalWithin(ctx, cl, j.id, 60*time.Second)
		if err != nil {
			t.Fatalf("%s %d (nonce %s): %v", j.typ, j.id, j.nonce, err)
		}
		j.state, j.finished, j.errText = state, fin, errText
		if state != j.want {
			t.Errorf("%s %d (nonce %s) ended %s (%s), want %s", j.typ, j.id, j.nonce, state, errText, j.want)
		}
	}
	// A retried nonce returns the first id.
	ids := map[uint64]string{}
	for _, j := range jobs {
		id, err := cl.Submit(ctx, j.typ, j.args, j.nonce, "it", 0)
		if err != nil {
			t.Errorf("resubmit nonce %s: %v", j.nonce, err)
			continue
		}
		if id != j.id {
			t.Errorf("resubmitting nonce %s returned id %d, first submission got %d", j.nonce, id, j.id)
		}
		if prev, dup := ids[j.id]; dup {
			t.Errorf("nonces %s and %s share id %d", prev, j.nonce, j.id)
		}
		ids[j.id] = j.nonce
	}
	roots, err := cl.ListAll(ctx, client.ListOptions{RootsOnly: true})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(roots) != procs {
		t.Errorf("cluster holds %d root procedures, want %d (one per nonce)", len(roots), procs)
	}
	for _, p := range roots {
		if _, ok := ids[p.GetId()]; !ok {
			t.Errorf("root procedure %d (%s, nonce %q, %s) was never acknowledged to a client", p.GetId(), p.GetType(), p.GetNonce(), p.GetState())
		}
	}

	// Terminal exactly once: one more failover must not re-run or change a
	// finished procedure.
	leader := c.WaitLeader(ctx)
	c.Kill(leader)
	c.WaitLeader(ctx)
	c.Restart(leader)
	for _, j := range jobs {
		p, err := cl.Get(ctx, j.id)
		if err != nil {
			t.Errorf("get %d after the last failover: %v", j.id, err)
			continue
		}
		if p.GetState() != j.state || p.GetFinishedUnixMs() != j.finished || p.GetError() != j.errText {
			t.Errorf("procedure %d changed after a further failover: %s finished %d (%q), was %s finished %d (%q)",
				j.id, p.GetState(), p.GetFinishedUnixMs(), p.GetError(), j.state, j.finished, j.errText)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("EffectsExactlyOnce", func(t *testing.T) {
		if _, err := c.Converge(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		doms := domainOrSkip(t, ctx, c)
		if len(doms) != 3 {
			t.Fatalf("domain state from %d nodes, want 3", len(doms))
		}
		ref := sameDomains(t, doms)
		checkEffects(t, jobs, ref)
	})
}

// checkEffects asserts exactly-once effects on one node's effects/ keys,
// per the diag contract (diag.EffectKey, diag.RecordEffect): a sleep holds
// keys 0..steps-1, each "1"; a fanout keys 0 and 1, each "1", and its
// children, the only other procedures with keys, are sleeps as above,
// exactly children per fanout (a re-spawn after failover would add more);
// a fail that rolled back holds keys 0..fail_at-1, each "0" (applied once,
// undone once) and none for the failed step, whose changes were dropped.
func checkEffects(t *testing.T, jobs []*job, effects map[string]string) {
	t.Helper()
	perProc := map[uint64]map[string]string{}
	for k, v := range effects {
		ps, step, ok := effectKey(k)
		if !ok {
			t.Errorf("malformed effect key %q", k)
			continue
		}
		id, err := strconv.ParseUint(ps, 10, 64)
		if err != nil {
			t.Errorf("effect key %q: procedure id %q is not a number", k, ps)
			continue
		}
		if perProc[id] == nil {
			perProc[id] = map[string]string{}
		}
		perProc[id][step] = v
	}
	expect := func(what string, id uint64, steps int, value string) {
		t.Helper()
		got := perProc[id]
		want := map[string]string{}
		for s := range steps {
			want[strconv.Itoa(s)] = value
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s %d: effects %v, want %v", what, id, got, want)
		}
	}
	roots := map[uint64]bool{}
	wantChildren, childSteps := 0, 0
	for _, j := range jobs {
		roots[j.id] = true
		switch j.typ {
		case "sleep":
			expect("sleep", j.id, j.steps, "1")
		case "fanout":
			expect("fanout", j.id, 2, "1")
			wantChildren += j.children
			childSteps = j.steps
		case "fail":
			failAt, _ := strconv.Atoi(j.args["fail_at"])
			expect("rolled-back fail", j.id, failAt, "0")
		}
	}
	children := 0
	for id := range perProc {
		if roots[id] {
			continue
		}
		children++
		expect("fanout child", id, childSteps, "1")
	}
	if children != wantChildren {
		t.Errorf("effects name %d non-root procedures, want %d fanout children (a re-spawn after failover would add more)", children, wantChildren)
	}
	t.Logf("%d effect keys over %d procedures (%d fanout children), each applied exactly once", len(effects), len(perProc), children)
}

// killLeaderAndAwait kills leader and waits for the next one, returning it and how
// long it took to be ready.
func killLeaderAndAwait(t *testing.T, ctx context.Context, c *harness.Cluster, leader string) (string, time.Duration) {
	t.Helper()
	killedAt := time.Now()
	c.Kill(leader)
	nl, err := c.AwaitLeader(ctx)
	if err != nil {
		t.Fatalf("no new leader after killing %s: %v", leader, err)
	}
	return nl, time.Since(killedAt)
}

// pauseThenLeader waits d, a pause that puts a kill at a point of its own,
// then returns whoever leads now: leadership may have moved during the
// pause on a loaded machine, and the victim must be the leader. kills is
// how many kills came before, for the failure message.
func pauseThenLeader(t *testing.T, ctx context.Context, c *harness.Cluster, d time.Duration, kills int) string {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("after %d kills: %v", kills, ctx.Err())
	case <-time.After(d):
	}
	leader, err := c.AwaitLeader(ctx)
	if err != nil {
		t.Fatalf("after %d kills: %v", kills, err)
	}
	return leader
}

// restartAndWait restarts the killed node id and waits, for at most 20 s,
// until it is up.
func restartAndWait(t *testing.T, ctx context.Context, c *harness.Cluster, id string) {
	t.Helper()
	c.Restart(id)
	uctx, ucancel := context.WithTimeout(ctx, 20*time.Second)
	defer ucancel()
	if _, err := c.WaitUp(uctx, id); err != nil {
		t.Fatalf("restarted %s: %v", id, err)
	}
}

// errList gathers the errors of a test's goroutines, for the test's own
// goroutine to report (t.Error is not for goroutines that may outlive it).
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// failNow reports every error gathered and stops the test if it has
// failed by now, so that what follows judges a run that went as meant.
func (l *errList) failNow(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	errs := l.errs
	l.mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// awaitSubmissions waits until the submitting goroutine closed done.
func awaitSubmissions(t *testing.T, ctx context.Context, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("submissions did not finish: %v", ctx.Err())
	}
}
