package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/memstat"
	"github.com/baton-dev/baton/proto/adminpb"
)

// benchTable is one table the open phase creates.
type benchTable struct {
	name    string
	regions int
	index   int // its place in the row's tables
}

// tableNames splits n regions into tables of per regions (the last one
// holds the rest).
func tableNames(n, per int) []benchTable {
	var out []benchTable
	for i := 0; n > 0; i++ {
		k := min(per, n)
		out = append(out, benchTable{name: fmt.Sprintf("bench_%d", i), regions: k, index: i})
		n -= k
	}
	return out
}

// openTables creates every table, concurrency at a time, and returns how
// long it took until the last create succeeded (a create succeeds once
// its regions are open).
func openTables(ctx context.Context, cl *client.Client, tables []benchTable, concurrency int) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan benchTable)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for t := range next {
				// The nonce makes the client's retries of one create
				// one procedure.
				id, err := cl.CreateTable(ctx, "", t.name, t.regions, "bench-create-"+t.name)
				if err == nil {
					err = waitSuccess(ctx, cl, id)
				}
				if err != nil {
					cancel(fmt.Errorf("create table %s (%d regions): %w", t.name, t.regions, err))
					return
				}
			}
		})
	}
	feed(ctx, next, tables)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// submitTables sends every create back to back, concurrency calls at a
// time, each waiting only for its acknowledgement, and waits for the
// procedures in the order sent, one watch at a time: every procedure must
// end anyway, so the waiter's order costs no time, and the cluster is not
// asked to serve a watch per table while it works. It returns the time
// until the last create succeeded and the time until the last was sent.
func submitTables(ctx context.Context, cl *client.Client, tables []benchTable, concurrency int) (open, submitted time.Duration, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ids := make([]chan uint64, len(tables))
	for i := range ids {
		ids[i] = make(chan uint64, 1)
	}
	next := make(chan benchTable)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for t := range next {
				i := t.index
				id, err := cl.CreateTable(ctx, "", t.name, t.regions, "bench-create-"+t.name)
				if err != nil {
					cancel(fmt.Errorf("create table %s (%d regions): %w", t.name, t.regions, err))
					return
				}
				ids[i] <- id
			}
		})
	}
	waited := make(chan error, 1)
	go func() {
		for i, ch := range ids {
			select {
			case id := <-ch:
				if err := waitSuccess(ctx, cl, id); err != nil {
					waited <- fmt.Errorf("create table %s (%d regions): %w", tables[i].name, tables[i].regions, err)
					return
				}
			case <-ctx.Done():
				waited <- context.Cause(ctx)
				return
			}
		}
		waited <- nil
	}()
	feed(ctx, next, tables)
	wg.Wait()
	submitted = time.Since(start)
	if werr := <-waited; werr != nil {
		cancel(werr)
	}
	if err := context.Cause(ctx); err != nil {
		return 0, 0, err
	}
	return time.Since(start), submitted, nil
}

// feed sends items to next, in order, until they are all sent or ctx
// ends, and closes next.
func feed[T any](ctx context.Context, next chan<- T, items []T) {
	defer close(next)
	for _, it := range items {
		select {
		case next <- it:
		case <-ctx.Done():
			return
		}
	}
}

// waitSuccess waits for procedure id to end, re-watching through errors
// (an election) until ctx ends; it fails unless the procedure succeeded.
func waitSuccess(ctx context.Context, cl *client.Client, id uint64) error {
	for {
		p, err := cl.Wait(ctx, id)
		if err == nil && client.Terminal(p.GetState()) {
			if p.GetState() != client.StateSuccess {
				return fmt.Errorf("procedure %d ended %s: %s", id, p.GetState(), p.GetError())
			}
			return nil
		}
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("procedure %d: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procedure %d not done: %w (last: %v)", id, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The Go runtime's figures a master's /metrics gives, for its heap.
const (
	goalMetric         = "go_memstats_next_gc_bytes"
	gogcMetric         = "go_gc_gogc_percent"
	heapSysMetric      = "go_memstats_heap_sys_bytes"
	heapReleasedMetric = "go_memstats_heap_released_bytes"
)

// measureMasters records each master's RSS and data sizes, and the live
// state size from the leader's local WAL.
func measureMasters(ctx context.Context, c *benchCluster, row *ScaleRow) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	row.Masters = nil
	row.MasterRSSMBMin, row.MasterRSSMBMax, row.DataMBMax = math.Inf(1), 0, 0
	for _, m := range c.masters {
		sm := ScaleMaster{
			ID: m.id, Leader: m == l, RSSMB: rssMB(m.Pid()), DataMB: dirMB(m.dataDir),
			RaftDBMB:    dirMB(filepath.Join(m.dataDir, "raft", "raft.db")),
			SnapshotsMB: dirMB(filepath.Join(m.dataDir, "snapshots")),
			WALMB:       dirMB(filepath.Join(m.dataDir, "fsm")),
		}
		// -1 where the split is unknown, as RSSMB is.
		r, _ := memstat.ReadRSS(m.Pid())
		sm.RSSAnonMB, sm.RSSFileMB = r.AnonMB, r.FileMB
		heap, err := c.scrapeMetric(ctx, m, goalMetric, gogcMetric, heapSysMetric, heapReleasedMetric)
		if err != nil {
			return err
		}
		sm.LiveHeapMB = liveHeapMB(heap[goalMetric], heap[gogcMetric])
		sm.HeapSysMB, sm.HeapReleasedMB = heap[heapSysMetric]/(1<<20), heap[heapReleasedMetric]/(1<<20)
		row.Masters = append(row.Masters, sm)
		row.MasterRSSMBMin = min(row.MasterRSSMBMin, sm.RSSMB)
		row.MasterRSSMBMax = max(row.MasterRSSMBMax, sm.RSSMB)
		row.DataMBMax = max(row.DataMBMax, sm.DataMB)
	}
	live, err := c.scrapeMetric(ctx, l, "baton_wal_live_bytes")
	if err != nil {
		return err
	}
	row.StateMB = live["baton_wal_live_bytes"] / (1 << 20)
	return nil
}

// failover SIGKILLs the leader and returns the time until a one-step
// procedure, submitted to the survivors as soon as the kill returned,
// succeeded. The killed master is then restarted and waited for.
func failover(ctx context.Context, c *benchCluster) (float64, error) {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := l.Kill(); err != nil {
		return 0, err
	}
	var id uint64
	err = poll(ctx, 50*time.Millisecond, "submitting a procedure to the surviving masters", func() (bool, string, error) {
		var err error
		id, err = c.cl.Submit(ctx, "sleep", map[string]string{"steps": "1", "delay": "0s"}, "bench-failover", "bench", 0)
		if err != nil && status.Code(err) == codes.InvalidArgument {
			return false, "", err
		}
		return err == nil, fmt.Sprint(err), nil
	})
	if err == nil {
		err = waitSuccess(ctx, c.cl, id)
	}
	d := time.Since(start).Seconds()
	if err != nil {
		return d, err
	}
	if err := l.start(); err != nil {
		return d, err
	}
	return d, c.waitCaughtUp(ctx, l)
}

// waitCaughtUp waits until master m has applied the leader's commit index
// as it was when the wait began.
func (c *benchCluster) waitCaughtUp(ctx context.Context, m *benchMaster) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	lst, err := c.status(ctx, l)
	if err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, m.id+" catching up with the leader", func() (bool, string, error) {
		if m.Crashed() {
			return false, "", fmt.Errorf("%s exited; see its log %s", m.name, m.logPath)
		}
		st, err := c.status(ctx, m)
		if err != nil {
			return false, err.Error(), nil
		}
		return st.AppliedIndex >= lst.CommitIndex, fmt.Sprintf("applied %d of %d", st.AppliedIndex, lst.CommitIndex), nil
	})
}

// crashRecovery SIGKILLs the region server holding the most regions and
// returns the time until every region is open elsewhere, the time until
// the leader saw its lease expire, and how many regions it held.
func crashRecovery(ctx context.Context, c *benchCluster, tables []benchTable, onDetected func()) (total, detected float64, held int, err error) {
	// After a failover the new leader shows every server unconfirmed
	// until it heartbeats.
	if err := c.waitServers(ctx, len(c.servers)); err != nil {
		return 0, 0, 0, err
	}
	ss, err := c.cl.ListServers(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	var victim *adminpb.Server
	for _, s := range ss {
		if s.GetLeaseState() == "live" && (victim == nil || s.GetRegionCount() > victim.GetRegionCount()) {
			victim = s
		}
	}
	if victim == nil {
		return 0, 0, 0, errors.New("no live region server")
	}
	var proc *benchProc
	for _, s := range c.servers {
		if s.name == "region server "+victim.GetId() {
			proc = s
		}
	}
	if proc == nil {
		return 0, 0, 0, fmt.Errorf("region server %s is not one the bench started", victim.GetId())
	}
	start := time.Now()
	kill := start.Add(-time.Second) // the masters' clocks are this machine's
	if err := proc.Kill(); err != nil {
		return 0, 0, 0, err
	}
	err = pollPaced(ctx, 100*time.Millisecond, "the leader noticing "+victim.GetId()+"'s crash", func() (bool, string, error) {
		ss, err := c.cl.ListServers(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, s := range ss {
			if s.GetId() == victim.GetId() && s.GetStartCode() == victim.GetStartCode() && s.GetLeaseState() != "expired" {
				return false, "its lease is " + s.GetLeaseState(), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		return 0, 0, 0, err
	}
	detected = time.Since(start).Seconds()
	onDetected()
	pending := map[string]bool{}
	for _, t := range tables {
		pending[t.name] = true
	}
	// The crash procedure ends only once no region is left on the dead
	// incarnation and every one it moved is open: waiting for it costs the
	// leader a procedure get per poll, where counting the regions costs a
	// scan of them all (at 1 M regions a seventh of the leader's CPU,
	// taken from the very recovery measured). The count is then taken
	// once, and polled only if it finds regions not open yet.
	if err := waitServerCrash(ctx, c.cl, victim, kill); err != nil {
		return 0, 0, 0, err
	}
	err = pollPaced(ctx, 250*time.Millisecond, "reopening the regions of "+victim.GetId(), func() (bool, string, error) {
		left, err := regionsNotReopened(ctx, c.cl, pending, victim.GetId())
		if err != nil {
			return false, err.Error(), nil
		}
		return left == 0, fmt.Sprintf("%d regions not open elsewhere yet", left), nil
	})
	return time.Since(start).Seconds(), detected, int(victim.GetRegionCount()), err
}

// waitServerCrash waits for the ServerCrash procedure of the victim's
// incarnation, submitted after since, to succeed.
func waitServerCrash(ctx context.Context, cl *client.Client, victim *adminpb.Server, since time.Time) error {
	var id uint64
	want := domain.ServerRef{ID: victim.GetId(), StartCode: victim.GetStartCode()}
	other := map[uint64]bool{} // crash procedures of other incarnations, read once
	err := pollEvery(ctx, 100*time.Millisecond, false, "the crash procedure of "+victim.GetId(), func() (bool, string, error) {
		procs, _, err := cl.List(ctx, client.ListOptions{Type: domain.TypeServerCrash, RootsOnly: true, NewestFirst: true, SubmittedAfter: since, PageSize: 100})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range procs {
			if other[p.GetId()] {
				continue
			}
			full, err := cl.Get(ctx, p.GetId())
			if err != nil {
				return false, err.Error(), nil
			}
			var scp domain.ServerCrash
			if err := json.Unmarshal(full.GetData(), &scp); err != nil {
				return false, "", fmt.Errorf("crash procedure %d: arguments: %w", p.GetId(), err)
			}
			if scp.Server == want {
				id = p.GetId()
				return true, "", nil
			}
			other[p.GetId()] = true
		}
		return false, "not submitted yet", nil
	})
	if err != nil {
		return err
	}
	if err := waitSuccess(ctx, cl, id); err != nil {
		return fmt.Errorf("the crash procedure of %s: %w", victim.GetId(), err)
	}
	return nil
}

// regionsNotReopened counts the regions of the pending tables that are not
// OPEN on a server other than dead, and drops from pending each table whose
// regions all are (they stay so: nothing else moves them while the bench
// runs). It reads the tables' region groups (counts per state and server),
// one table list per call rather than every region: at 1 M regions listing
// them all four times a second was a good part of the leader's CPU, in the
// very recovery it measures. A pending table missing from the list is an
// error, never "all reopened".
func regionsNotReopened(ctx context.Context, cl *client.Client, pending map[string]bool, dead string) (int, error) {
	left := 0
	seen := 0
	for t, err := range cl.Tables(ctx, &adminpb.ListTablesRequest{}) {
		if err != nil {
			return 0, err
		}
		name := t.GetName()
		if !pending[name] {
			name = t.GetNamespace() + ":" + t.GetName()
			if !pending[name] {
				continue
			}
		}
		seen++
		n := 0
		for _, g := range t.GetRegionGroups() {
			if g.GetState() != "OPEN" || g.GetServer() == dead {
				n += int(g.GetCount())
			}
		}
		if n == 0 {
			delete(pending, name)
		}
		left += n
	}
	if seen < len(pending) {
		return 0, fmt.Errorf("%d of the %d tables not reopened yet are missing from the table list", len(pending)-seen, len(pending))
	}
	return left, nil
}

// catchUp stops a follower, reads the free space inside its raft.db, wipes
// its data directory and starts it again, timing until it has applied the
// leader's commit index.
func catchUp(ctx context.Context, c *benchCluster, row *ScaleRow) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	var f *benchMaster
	for _, m := range c.masters {
		if m != l && m.Running() {
			f = m
			break
		}
	}
	if f == nil {
		return errors.New("no running follower")
	}
	if err := f.Kill(); err != nil {
		return err
	}
	db := filepath.Join(f.dataDir, "raft", "raft.db")
	if free, err := boltFreeMB(db); err == nil {
		size := dirMB(db)
		row.RaftDBStoppedMB, row.RaftDBFreeMB = &size, &free
	}
	if err := os.RemoveAll(f.dataDir); err != nil {
		return err
	}
	start := time.Now()
	if err := f.start(); err != nil {
		return err
	}
	err = c.waitCaughtUp(ctx, f)
	d := time.Since(start).Seconds()
	row.CatchUpSeconds = &d
	log, rerr := os.ReadFile(f.logPath)
	snap := rerr == nil && strings.Contains(string(log), "Installed remote snapshot")
	row.CatchUpFromSnapshot = &snap
	return err
}

// boltFreeMB opens a stopped master's raft.db read-only and returns the
// bytes of the file no bucket uses: pages freed by log compaction, which
// bolt reuses for new entries but never returns to the file system. (The
// freelist itself is not read: raft-boltdb may not persist it.)
func boltFreeMB(path string) (float64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var used int64
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			st := b.Stats()
			pages := st.BranchPageN + st.BranchOverflowN + st.LeafPageN + st.LeafOverflowN
			used += int64(pages) * int64(db.Info().PageSize)
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	return float64(max(fi.Size()-used, 0)) / (1 << 20), nil
}
