package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/chaos"
	"github.com/baton-dev/baton/integration/harness"
)

// The disaster drills of issue 31 (item 6), with real processes: three
// masters and three region servers holding a table layout of
// BATON_DRILL_REGIONS regions (default 200, the CI size; 10000 and 100000
// give BENCHMARKS.md's figures: `make bench-drills`), a few procedures in
// flight at the disaster, then
//
//   - TestDrillRestore (a): snapshot saved, every master's data destroyed,
//     restored into fresh directories, the agents restarted;
//   - TestDrillRecoverQuorum (b): two masters killed and their data
//     deleted, the third recovered alone (--recover-quorum --yes), two
//     new members joined;
//   - TestDrillReplacedDisk (c): a member's data deleted, restarted empty
//     with the same id, caught up by installing the leader's snapshot;
//   - TestDrillRestoreStale (d): (a) with a snapshot older than the
//     region servers' reality: after the save a region server is lost
//     for good (its regions reassigned), leaders are killed until the
//     term is above the restored cluster's, a replacement region server
//     the snapshot never heard of joins and a balance moves regions onto
//     it; the region servers are sampled throughout for a region open on
//     two of them.
//
// (a), (b) and (d) end with the chaos suite's end-state audit (chaos.Audit):
// every region server live, every region of the layout open on exactly
// one of them, every procedure acknowledged before the disaster finished
// (SUCCESS), none unfinished. Each drill logs its timings on a line
// starting "drill:".

// drillRegions is the drills' region count (BATON_DRILL_REGIONS).
func drillRegions(t *testing.T) int {
	t.Helper()
	v := os.Getenv("BATON_DRILL_REGIONS")
	if v == "" {
		return 200
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		t.Fatalf("BATON_DRILL_REGIONS=%q: want a number of regions in 1..1000000", v)
	}
	return n
}

// drillTableRegions is the size of each table of the layout, as `baton
// bench scale` makes them.
const drillTableRegions = 2000

// drill is one drill's cluster and what it acknowledged.
type drill struct {
	t       *testing.T
	ctx     context.Context
	c       *harness.Cluster
	regions int

	mu    sync.Mutex
	acked map[uint64]string // id -> what, every procedure the cluster acknowledged
}

// newDrill starts three masters (with env added to theirs) and three
// region servers, and places the layout: tables of drillTableRegions
// regions, four created at a time, until drillRegions. The drill's
// context is bounded by a budget that grows with the region count.
func newDrill(t *testing.T, env ...string) *drill {
	t.Helper()
	regions := drillRegions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+time.Duration(regions)*10*time.Millisecond)
	t.Cleanup(cancel)
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, Env: env})
	c.WaitLeader(ctx)
	c.StartRegionServers(3, harness.RSOptions{})
	if _, err := c.WaitRegionServers(ctx); err != nil {
		t.Fatal(err)
	}
	d := &drill{t: t, ctx: ctx, c: c, regions: regions, acked: map[uint64]string{}}
	start := time.Now()
	var tables []int
	for left := regions; left > 0; left -= drillTableRegions {
		tables = append(tables, min(left, drillTableRegions))
	}
	errs := make(chan error, len(tables))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, n := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- d.createTable(fmt.Sprintf("drill-%d", i), n)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("drill: %d regions in %d tables placed in %v", regions, len(tables), time.Since(start).Round(time.Millisecond))
	return d
}

// createTable creates table name of n regions and waits for its success
// (its regions are then open).
func (d *drill) createTable(name string, n int) error {
	cl := d.c.Client()
	nonce := "drill-create-" + name
	var id uint64
	for {
		cctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		var err error
		id, err = cl.CreateTable(cctx, "", name, n, nonce)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-d.ctx.Done():
			return fmt.Errorf("create table %s: %w", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	d.ack(id, "create table "+name)
	p, err := cl.Wait(d.ctx, id)
	if err != nil || p.GetState() != client.StateSuccess {
		return fmt.Errorf("create table %s (procedure %d): %v, %w", name, id, p.GetState(), err)
	}
	return nil
}

func (d *drill) ack(id uint64, what string) {
	d.mu.Lock()
	d.acked[id] = what
	d.mu.Unlock()
}

// inFlight submits n sleep procedures long enough to be in flight at the
// disaster that follows (20 steps of 200 ms), through cl.
func (d *drill) inFlight(cl *client.Client, n int, prefix string) []uint64 {
	d.t.Helper()
	var ids []uint64
	for i := range n {
		id, _, err := submitRetrying(d.ctx, cl, "sleep", map[string]string{"steps": "20", "delay": "200ms"}, fmt.Sprintf("%s-inflight-%d", prefix, i))
		if err != nil {
			d.t.Fatal(err)
		}
		d.ack(id, "sleep in flight")
		ids = append(ids, id)
	}
	return ids
}

// serving waits until a leader is ready and a new one-step procedure
// submitted through cl succeeds: the cluster serves again.
func (d *drill) serving(cl *client.Client, nonce string) {
	d.t.Helper()
	d.c.WaitLeader(d.ctx)
	id, _, err := submitRetrying(d.ctx, cl, "sleep", map[string]string{"steps": "1", "delay": "1ms"}, nonce)
	if err != nil {
		d.t.Fatal(err)
	}
	if p, err := cl.Wait(d.ctx, id); err != nil || p.GetState() != client.StateSuccess {
		d.t.Fatalf("first procedure after the disaster: %v, %v", p.GetState(), err)
	}
	d.ack(id, "first after the disaster")
}

// audit runs the chaos suite's end-state audit over the acknowledged
// procedures, bounded by its liveness bound plus time for the layout's
// size, and then checks each acknowledged procedure SUCCEEDED (terminal
// is not enough: none of them may roll back). It returns how long the
// audit took to pass.
func (d *drill) audit(cl *client.Client) time.Duration {
	d.t.Helper()
	start := time.Now()
	d.mu.Lock()
	acked := maps.Clone(d.acked)
	d.mu.Unlock()
	within := chaos.LivenessBound() + time.Duration(d.regions)*time.Millisecond
	res := chaos.Audit(d.ctx, d.c, cl, acked, nil, within)
	took := time.Since(start)
	d.t.Logf("drill: audit: %s", res.Summary())
	if err := res.Err(); err != nil {
		d.t.Fatalf("end-state audit after %v:\n%v", took.Round(time.Millisecond), err)
	}
	for id, what := range acked {
		cctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		p, err := cl.Get(cctx, id)
		cancel()
		if err != nil || p.GetState() != client.StateSuccess {
			d.t.Errorf("procedure %d (%s) after the disaster: %v, %v", id, what, p.GetState(), err)
		}
	}
	n := 0
	for _, id := range d.c.RegionServerIDs() {
		r, err := d.c.RSRegions(d.ctx, id)
		if err != nil {
			d.t.Fatal(err)
		}
		n += len(r.GetRegions())
	}
	if n != d.regions {
		d.t.Fatalf("%d regions open on the region servers, the layout has %d", n, d.regions)
	}
	return took
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// TestDrillRestore is drill (a): a snapshot saved with the CLI while
// procedures are in flight, every master killed and its data directory
// deleted, the snapshot restored into each fresh directory, the agents
// restarted with their usual command lines: the cluster serves again and
// passes the end-state audit, every procedure acknowledged before the
// save SUCCESS.
//
// The region servers keep running throughout. They remember the highest
// leader term they saw and hold start codes the restored state may not
// know; the restored masters' answers name another cluster (its id), so
// each closes what it hosts and registers again (docs/operations.md,
// "Restore"), and the audit judges servers that never stopped.
func TestDrillRestore(t *testing.T) {
	d := newDrill(t)
	c, cl := d.c, d.c.Client()
	d.inFlight(cl, 3, "a")
	leader := c.WaitLeader(d.ctx)

	file := filepath.Join(t.TempDir(), "drill.baton")
	start := time.Now()
	code, stdout, stderr := runCLI(t, d.ctx, "snapshot", "save", file, "--addr", c.Node(leader).GRPCAddr)
	expectExit(t, "snapshot save", code, 0, stdout+stderr)
	save := time.Since(start)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	// What the cluster acknowledges after the save is not in the
	// snapshot: the audit holds the restored cluster to what was acked
	// before it, and nothing is submitted in between.

	restore := d.destroyAndRestore(file, nil)

	start = time.Now()
	for _, n := range c.Nodes {
		c.Restart(n.ID)
	}
	d.serving(cl, "a-after")
	serve := time.Since(start)

	// The region servers kept running throughout: each learns from the
	// restored masters' answers that the cluster is a new one (its id),
	// closes what it hosted and registers again; the audit then finds
	// every region open exactly once.
	open := d.audit(cl)
	t.Logf("drill: (a) restore: regions=%d snapshot=%dB save=%s restore=%s (3 members) serve=%s audit=%s",
		d.regions, st.Size(), secs(save), secs(restore), secs(serve), secs(open))
}

// TestDrillRestoreStale is drill (d): drill (a) with a restored state
// older than the region servers' reality. After the snapshot is saved
// (procedures in flight), the old cluster lives on: the region server
// hosting the most regions is killed for good and the crash procedure
// reopens its regions on the other two; leaders are killed until the
// term is two past the save's, so the region servers remember a term
// above the restored leader's (the id is judged first); a replacement
// region server joins, unknown to the snapshot, and a balance moves
// regions onto it. Then every master's data is destroyed, the snapshot
// restored and the masters restarted, while the surviving region servers
// keep running. The restored state records regions on the lost server
// (its lease must expire), others where they no longer are, and none on
// the replacement, which hosts some: docs/operations.md, "Restore", says
// every region server drops what it hosts on the new cluster id and the
// regions are reassigned, never open twice. The end-state audit must pass
// and chaos.Sampler, reading the region servers' own answers from before
// the save until the audit passed, must never find a region open on two
// of them at one moment.
//
// Its line "drill:" gives save, restore, serve (as (a)) and reconcile:
// from the masters' restart until the audit passed.
func TestDrillRestoreStale(t *testing.T) {
	d := newDrill(t)
	c, cl := d.c, d.c.Client()

	sampler := chaos.NewSampler(c, time.Second)
	sctx, stopSampler := context.WithCancel(d.ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); sampler.Run(sctx, 100*time.Millisecond) }()
	defer func() { stopSampler(); <-sampled }()

	d.inFlight(cl, 3, "d")
	leader := c.WaitLeader(d.ctx)
	saved := d.placement()
	ls, err := c.WaitUp(d.ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	saveTerm, oldTerm := ls.Term, ls.Term
	file := filepath.Join(t.TempDir(), "drill.baton")
	start := time.Now()
	code, stdout, stderr := runCLI(t, d.ctx, "snapshot", "save", file, "--addr", c.Node(leader).GRPCAddr)
	expectExit(t, "snapshot save", code, 0, stdout+stderr)
	save := time.Since(start)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}

	// Reality moves on. Nothing of it is acknowledged to the audit: the
	// restored cluster never heard of it.
	counts := map[string]int{}
	for _, srv := range saved {
		counts[srv]++
	}
	lost := slices.MaxFunc(c.RegionServerIDs(), func(a, b string) int { return counts[a] - counts[b] })
	start = time.Now()
	c.RetireRS(lost)
	d.settled("the old cluster, " + lost + " lost")
	reassign := time.Since(start)

	// Leaders killed until the old cluster's term is two past the save's:
	// the restored cluster's first is the snapshot's + 1, so the region
	// servers then remember a term above the restored leader's.
	var kills []string
	for term := saveTerm; term < saveTerm+2; {
		old := c.WaitLeader(d.ctx)
		c.Kill(old)
		leader = c.WaitLeader(d.ctx) // a running node: another one, elected in a higher term
		c.Restart(old)
		kills = append(kills, old)
		st, err := c.WaitUp(d.ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		term = st.Term
		oldTerm = term
	}
	t.Logf("drill: the old cluster's leaders %v killed: term %d at the save, %d now", kills, saveTerm, oldTerm)

	fresh := c.StartRegionServers(1, harness.RSOptions{})[0].ID
	if _, err := c.WaitRegionServers(d.ctx); err != nil {
		t.Fatal(err)
	}
	id, _, err := startRetrying(d.ctx, "balance", func(ctx context.Context) (uint64, error) { return cl.Balance(ctx, "d-balance") })
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(d.ctx, id); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("balance (procedure %d): %v, %v", id, p.GetState(), err)
	}
	d.settled("the old cluster, balanced onto " + fresh)
	now := d.placement()
	moved, onFresh := 0, 0
	for region, srv := range now {
		if saved[region] != srv {
			moved++
		}
		if srv == fresh {
			onFresh++
		}
	}
	if moved == 0 || onFresh == 0 {
		t.Fatalf("after the save %d regions moved, %d onto %s: the restored state would not be stale", moved, onFresh, fresh)
	}
	t.Logf("drill: since the save: %s lost (its %d regions reassigned in %s), %d of %d regions moved, %d onto %s, unknown to the snapshot",
		lost, counts[lost], secs(reassign), moved, d.regions, onFresh, fresh)

	var before int
	restore := d.destroyAndRestore(file, func() { before, _, _ = sampler.Result() })

	start = time.Now()
	for _, n := range c.Nodes {
		c.Restart(n.ID)
	}
	d.serving(cl, "d-after")
	serve := time.Since(start)
	rs, err := c.WaitUp(d.ctx, c.WaitLeader(d.ctx))
	if err != nil {
		t.Fatal(err)
	}
	d.audit(cl)
	reconcile := time.Since(start)

	stopSampler()
	<-sampled
	samples, doubles, reports := sampler.Result()
	if doubles > 0 {
		t.Fatalf("SAFETY VIOLATION: %d samples found a region open on two servers; the first ones:\n%s", doubles, strings.Join(reports, "\n"))
	}
	if samples-before < 3 {
		t.Fatalf("%d placement samples across the restore and the reconciliation: too few to judge", samples-before)
	}
	t.Logf("drill: (d) restore stale: regions=%d moved=%d terms=%d>%d snapshot=%dB save=%s restore=%s (3 members) serve=%s reconcile=%s samples=%d (%d from the restore) doubles=0",
		d.regions, moved, oldTerm, rs.Term, st.Size(), secs(save), secs(restore), secs(serve), secs(reconcile), samples, samples-before)
}

// placement returns where each region is open now, by the region
// servers' own answers.
func (d *drill) placement() map[string]string {
	d.t.Helper()
	out := map[string]string{}
	for _, id := range d.c.RegionServerIDs() {
		r, err := d.c.RSRegions(d.ctx, id)
		if err != nil {
			d.t.Fatalf("regions of %s: %v", id, err)
		}
		for _, h := range r.GetRegions() {
			out[h.GetRegion()] = id
		}
	}
	return out
}

// settled waits, with the end-state audit (nothing acknowledged to it),
// until the cluster is at rest: every region server live, every region
// open on exactly one of them, no procedure unfinished.
func (d *drill) settled(what string) {
	d.t.Helper()
	within := chaos.LivenessBound() + time.Duration(d.regions)*time.Millisecond
	res := chaos.Audit(d.ctx, d.c, d.c.Client(), nil, nil, within)
	if err := res.Err(); err != nil {
		d.t.Fatalf("%s never settled:\n%v", what, err)
	}
}

// TestDrillRecoverQuorum is drill (b): with the region servers running
// throughout, two masters are killed and their data deleted; the third,
// once it has applied everything, is restarted with --recover-quorum
// --yes and serves alone; two new members (new ids, empty directories)
// are added with 'baton cluster join' and catch up; the end-state audit
// passes and every procedure acknowledged before the loss SUCCEEDED.
func TestDrillRecoverQuorum(t *testing.T) {
	d := newDrill(t)
	c, cl := d.c, d.c.Client()
	d.inFlight(cl, 3, "b")
	leader := c.WaitLeader(d.ctx)
	survivor := c.Followers(leader)[0]
	d.waitApplied(survivor, leader)

	for _, n := range c.Nodes {
		c.Kill(n.ID)
		if n.ID != survivor {
			if err := os.RemoveAll(n.DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	c.RestartArgs(survivor, "--recover-quorum", "--yes")
	d.serving(cl, "b-after")
	serve := time.Since(start)

	start = time.Now()
	s := c.Node(survivor)
	var fresh []string
	for _, id := range []string{"n4", "n5"} {
		m := c.AddNode(id)
		code, stdout, stderr := runCLI(t, d.ctx, "cluster", "join", "--id", id, "--raft-addr", m.RaftAddr, "--admin-addr", m.GRPCAddr, "--addr", s.GRPCAddr)
		expectExit(t, "cluster join "+id, code, 0, stdout+stderr)
		fresh = append(fresh, id)
	}
	for _, id := range fresh {
		d.waitApplied(id, survivor)
	}
	join := time.Since(start)
	d.wantVoters(cl, append([]string{survivor}, fresh...))

	open := d.audit(cl)
	t.Logf("drill: (b) recover-quorum: regions=%d serve=%s join=%s (2 members, caught up) audit=%s",
		d.regions, secs(serve), secs(join), secs(open))
}

// TestDrillReplacedDisk is drill (c): the masters compact their Raft logs
// after a few dozen entries (--raft-snapshot-threshold, --raft-trailing-
// logs, by environment); a follower is killed and its data directory
// deleted (its disk replaced), more work is done without it, and it is
// started again with the same id and addresses on the empty directory,
// without --peers, and added with 'baton cluster join' (the same id and
// address: already a member) as docs/operations.md tells. It catches up
// by installing the leader's snapshot (its log says so): its applied
// index reaches the leader's, and its own answers (stale reads served by
// it) list the same procedures and regions as the leader's.
func TestDrillReplacedDisk(t *testing.T) {
	d := newDrill(t, "BATON_RAFT_SNAPSHOT_THRESHOLD=64", "BATON_RAFT_TRAILING_LOGS=32", "BATON_RAFT_SNAPSHOT_INTERVAL=200ms")
	c, cl := d.c, d.c.Client()
	leader := c.WaitLeader(d.ctx)
	member := c.Followers(leader)[0]
	c.Kill(member)
	m := c.Node(member)
	if err := os.RemoveAll(m.DataDir); err != nil {
		t.Fatal(err)
	}
	// Work done without it: more than the trailing logs, one procedure
	// at a time so that group commit cannot fold it into a few entries,
	// and whatever was in flight when the member went.
	for i := range 40 {
		id, _, err := submitRetrying(d.ctx, cl, "sleep", map[string]string{"steps": "2", "delay": "1ms"}, fmt.Sprintf("c-without-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		d.ack(id, "sleep without the member")
		if p, err := cl.Wait(d.ctx, id); err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("procedure %d: %v, %v", id, p.GetState(), err)
		}
	}
	leader = c.WaitLeader(d.ctx)
	d.waitCompacted(leader, 64)

	start := time.Now()
	m.Joiner = true // the replaced disk holds no raft state: no --peers, it is added
	c.Restart(member)
	code, stdout, stderr := runCLI(t, d.ctx, "cluster", "join", "--id", member, "--raft-addr", m.RaftAddr, "--admin-addr", m.GRPCAddr, "--addr", c.Node(leader).GRPCAddr)
	expectExit(t, "cluster join "+member, code, 0, stdout+stderr)
	d.waitApplied(member, leader)
	catchUp := time.Since(start)
	if !strings.Contains(c.CurrentLog(member), "Installed remote snapshot") {
		t.Fatalf("%s caught up without installing a snapshot: the leader's log still reached back to index 1", member)
	}
	if _, err := c.Converge(d.ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d.sameAnswers(member, leader)
	t.Logf("drill: (c) replaced disk: regions=%d catch_up=%s (by snapshot)", d.regions, secs(catchUp))
}

// waitApplied waits until node id has applied the commit index node of
// has now.
func (d *drill) waitApplied(id, of string) {
	d.t.Helper()
	ls, err := d.c.Status(d.ctx, of)
	if err != nil {
		d.t.Fatal(err)
	}
	for {
		st, err := d.c.Status(d.ctx, id)
		if err == nil && st.FSMIndex >= ls.CommitIndex {
			return
		}
		select {
		case <-d.ctx.Done():
			d.t.Fatalf("%s never applied %s's commit index %d: %v (at %d)", id, of, ls.CommitIndex, err, st.FSMIndex)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitCompacted waits until node id holds a Raft snapshot more than
// trailing entries past index 1: its log no longer starts at 1, so an
// empty member can only catch up from a snapshot. Snapshots are named
// <term>-<index>-<ms> in the data directory's snapshots/.
func (d *drill) waitCompacted(id string, trailing uint64) {
	d.t.Helper()
	dir := filepath.Join(d.c.Node(id).DataDir, "snapshots")
	var last uint64
	for {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			parts := strings.Split(e.Name(), "-")
			if len(parts) < 3 {
				continue
			}
			if i, err := strconv.ParseUint(parts[1], 10, 64); err == nil {
				last = max(last, i)
			}
		}
		if last > trailing+1 {
			return
		}
		select {
		case <-d.ctx.Done():
			d.t.Fatalf("%s never compacted its log: last snapshot at index %d", id, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wantVoters fails unless the cluster's members are exactly ids.
func (d *drill) wantVoters(cl *client.Client, ids []string) {
	d.t.Helper()
	st, err := cl.Status(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	var have []string
	for _, p := range st.GetPeers() {
		have = append(have, p.GetId())
	}
	slices.Sort(have)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(have, want) {
		d.t.Fatalf("members %v, want %v", have, want)
	}
}

// sameAnswers compares what node id answers from its own state with what
// node of answers: every procedure (id and state) and every region of
// every table (name, state, server).
func (d *drill) sameAnswers(id, of string) {
	d.t.Helper()
	read := func(node string) (procs, regions []string) {
		nc, err := client.New([]string{d.c.Node(node).GRPCAddr}, client.WithCallTimeout(30*time.Second))
		if err != nil {
			d.t.Fatal(err)
		}
		defer nc.Close()
		ps, err := nc.ListAll(d.ctx, client.ListOptions{PageSize: 1000}, client.Stale())
		if err != nil {
			d.t.Fatalf("%s: list procedures: %v", node, err)
		}
		for _, p := range ps {
			procs = append(procs, fmt.Sprintf("%d %s", p.GetId(), p.GetState()))
		}
		tables, err := nc.ListTables(d.ctx, "", client.Stale())
		if err != nil {
			d.t.Fatalf("%s: list tables: %v", node, err)
		}
		for _, tb := range tables {
			rs, err := nc.ListRegions(d.ctx, tb.GetNamespace()+":"+tb.GetName(), client.Stale())
			if err != nil {
				d.t.Fatalf("%s: list regions: %v", node, err)
			}
			for _, r := range rs {
				regions = append(regions, fmt.Sprintf("%s %s %s", r.GetName(), r.GetState(), r.GetServer()))
			}
		}
		slices.Sort(procs)
		slices.Sort(regions)
		return procs, regions
	}
	mp, mr := read(id)
	lp, lr := read(of)
	if len(mr) != d.regions {
		d.t.Fatalf("%s lists %d regions, the layout has %d", id, len(mr), d.regions)
	}
	if !slices.Equal(mp, lp) {
		d.t.Fatalf("%s lists %d procedures, %s %d: they differ", id, len(mp), of, len(lp))
	}
	if !slices.Equal(mr, lr) {
		d.t.Fatalf("%s and %s list different regions", id, of)
	}
}

// destroyAndRestore kills every master and deletes its data, calls
// destroyed (if any), then restores file into each master's directory
// with the cluster's own ids and peers ('baton snapshot restore', one
// after the other) and returns how long the restores took.
func (d *drill) destroyAndRestore(file string, destroyed func()) time.Duration {
	t, c := d.t, d.c
	t.Helper()
	var peers []string
	for _, n := range c.Nodes {
		peers = append(peers, n.ID+"="+n.RaftAddr)
	}
	for _, n := range c.Nodes {
		c.Kill(n.ID)
		if err := os.RemoveAll(n.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	if destroyed != nil {
		destroyed()
	}
	start := time.Now()
	for _, n := range c.Nodes {
		code, stdout, stderr := runCLI(t, d.ctx, "snapshot", "restore", file, "--data-dir", n.DataDir, "--id", n.ID, "--peers", strings.Join(peers, ","))
		expectExit(t, "snapshot restore "+n.ID, code, 0, stdout+stderr)
	}
	return time.Since(start)
}
