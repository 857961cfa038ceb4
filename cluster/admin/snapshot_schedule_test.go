package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/snapdir"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// fakeSnapSource is a leader (or not) over an in-memory FSM whose state
// the test moves on.
type fakeSnapSource struct {
	fsm    *raftfsm.FSM
	clk    clock.Clock
	leader atomic.Bool
	index  uint64
}

func newFakeSnapSource(t *testing.T, clk clock.Clock) *fakeSnapSource {
	f, err := raftfsm.NewFSM(raftfsm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	src := &fakeSnapSource{fsm: f, clk: clk}
	src.leader.Store(true)
	return src
}

// apply commits one more procedure and key.
func (f *fakeSnapSource) apply(t *testing.T) {
	f.index++
	b, err := raftfsm.EncodeProcBatch(raftfsm.Write{Inserts: []store.Proc{{ID: f.index, Data: []byte("p")}},
		Mutations: []raftfsm.Mutation{raftfsm.Put(fmt.Sprintf("table/t%d", f.index), []byte("enabled"))}})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.fsm.Apply(&raft.Log{Index: f.index, Term: 1, Type: raft.LogCommand, Data: b}); r != nil {
		t.Fatalf("apply: %v", r)
	}
}

func (f *fakeSnapSource) IsLeader() bool { return f.leader.Load() }

func (f *fakeSnapSource) snapshotPoint(_ context.Context, by string) (snapshotAt, error) {
	if !f.leader.Load() {
		return snapshotAt{}, cluster.ErrNotLeader
	}
	return snapshotAt{header: raftfsm.SnapshotFileHeader{ClusterID: "c0ffee", Term: 1, CreatedUnixMs: f.clk.Now().UnixMilli(), TakenBy: by, ServedBy: "m1"},
		view: f.fsm.View()}, nil
}

func newTestScheduler(t *testing.T, src *fakeSnapSource, clk clock.Clock, dir string, retain int) *snapshotScheduler {
	t.Helper()
	sc, err := newSnapshotScheduler(SnapshotSchedule{Interval: time.Hour, Dir: dir, Retain: retain, Clock: clk, Metrics: prometheus.NewRegistry()}, src, "m1", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.stop)
	sc.start()
	return sc
}

// dirNames lists dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// On fake time: a snapshot at once on a leader with an empty directory,
// then one every interval and none between; each named for its time and
// index, verified whole; the oldest removed beyond the count, and nothing
// else in the directory touched.
func TestScheduledSnapshotsEveryIntervalKeepTheNewest(t *testing.T) {
	clk := clock.NewManual(t0)
	src := newFakeSnapSource(t, clk)
	dir := filepath.Join(t.TempDir(), "snaps") // created by the scheduler
	for _, other := range []string{"notes.txt", "baton-c0ffee-20200101T000000Z-1.snap.bak"} {
		defer func() {
			if _, err := os.Stat(filepath.Join(dir, other)); err != nil {
				t.Errorf("%s, not a scheduled snapshot, is gone: %v", other, err)
			}
		}()
	}
	src.apply(t)
	sc := newTestScheduler(t, src, clk, dir, 3)
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("snapshot directory: %v, %v; want created 0700", st, err)
	}
	for _, other := range []string{"notes.txt", "baton-c0ffee-20200101T000000Z-1.snap.bak"} {
		if err := os.WriteFile(filepath.Join(dir, other), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(0)
	want := []string{"baton-c0ffee-20250301T120000Z-1.snap"}
	if got := snapNames(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the first tick: %v, want %v", got, want)
	}
	for i := 2; i <= 6; i++ {
		src.apply(t)
		clk.Advance(30 * time.Minute)
		if n := len(snapNames(t, dir)); n != min(i-1, 3) {
			t.Fatalf("half an interval later: %d snapshots, want %d", n, min(i-1, 3))
		}
		clk.Advance(30 * time.Minute)
	}
	want = []string{"baton-c0ffee-20250301T150000Z-4.snap", "baton-c0ffee-20250301T160000Z-5.snap", "baton-c0ffee-20250301T170000Z-6.snap"}
	if got := snapNames(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 6 intervals, keeping 3: %v, want %v", got, want)
	}
	for _, name := range want {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := raftfsm.VerifySnapshotFile(f)
		f.Close()
		if err != nil || h.TakenBy != "master/m1" || h.Procs == 0 {
			t.Errorf("%s: header %+v, %v", name, h, err)
		}
		if st, _ := os.Stat(filepath.Join(dir, name)); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	last := sc.Last()
	if last == nil || last.Index != 6 || !last.Time.Equal(t0.Add(5*time.Hour)) || last.Bytes == 0 {
		t.Fatalf("last %+v", last)
	}
	if got := testutil.ToFloat64(sc.m.lastIndex); got != 6 {
		t.Errorf("baton_snapshot_last_success_index %v, want 6", got)
	}
	if got := testutil.ToFloat64(sc.m.lastTime); got != float64(t0.Add(5*time.Hour).Unix()) {
		t.Errorf("baton_snapshot_last_success_timestamp_seconds %v", got)
	}
	if got := testutil.ToFloat64(sc.m.lastBytes); got != float64(last.Bytes) {
		t.Errorf("baton_snapshot_last_success_size_bytes %v, want %d", got, last.Bytes)
	}
	if got := testutil.ToFloat64(sc.m.failures); got != 0 {
		t.Errorf("failures %v", got)
	}
}

// snapNames are the scheduled snapshots in dir.
func snapNames(t *testing.T, dir string) []string {
	var out []string
	for _, n := range dirNames(t, dir) {
		if snapdir.NameRE.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

// A master that loses leadership writes nothing more; once it leads
// again it goes on. A new scheduler over the same directory (a restart,
// or the next leader on a shared directory) goes on from the newest file's
// time instead of writing one at once.
func TestScheduledSnapshotsOnlyOnTheLeader(t *testing.T) {
	clk := clock.NewManual(t0)
	src := newFakeSnapSource(t, clk)
	dir := t.TempDir()
	sc := newTestScheduler(t, src, clk, dir, 5)
	clk.Advance(0)
	if n := len(snapNames(t, dir)); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	src.leader.Store(false)
	for range 3 * 60 {
		clk.Advance(time.Minute)
	}
	if n := len(snapNames(t, dir)); n != 1 {
		t.Fatalf("3 intervals without leading: %d snapshots, want still 1", n)
	}
	src.leader.Store(true)
	clk.Advance(time.Second) // the leadership poll
	if n := len(snapNames(t, dir)); n != 2 {
		t.Fatalf("leading again, overdue: %d snapshots, want 2", n)
	}
	sc.stop()

	// Another master's scheduler on this directory, 10 minutes later.
	clk.Advance(10 * time.Minute)
	next := newTestScheduler(t, src, clk, dir, 5)
	if l := next.Last(); l == nil || l.Index != 0 || l.Bytes == 0 {
		t.Fatalf("taken from the directory: %+v", l)
	}
	clk.Advance(0)
	if n := len(snapNames(t, dir)); n != 2 {
		t.Fatalf("a new scheduler wrote at once: %d snapshots, want 2", n)
	}
	clk.Advance(50 * time.Minute)
	if n := len(snapNames(t, dir)); n != 3 {
		t.Fatalf("an interval after the newest file: %d snapshots, want 3", n)
	}
}

// A file that does not read back (a byte changed on its way to the disk)
// is removed and counted; so is a write that fails (a full disk), leaving
// no partial or temporary file. The next interval tries again.
func TestScheduledSnapshotFailuresLeaveNothing(t *testing.T) {
	clk := clock.NewManual(t0)
	src := newFakeSnapSource(t, clk)
	src.apply(t)
	dir := t.TempDir()
	sc, err := newSnapshotScheduler(SnapshotSchedule{Interval: time.Hour, Dir: dir, Retain: 2, Clock: clk, Metrics: prometheus.NewRegistry()}, src, "m1", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.stop()
	sc.wrap = func(w io.Writer) io.Writer { return &flipWriter{w: w, at: 100} }
	sc.start()
	clk.Advance(0)
	if got := dirNames(t, dir); len(got) != 0 {
		t.Fatalf("a file that failed its read-back left %v", got)
	}
	if got := testutil.ToFloat64(sc.m.failures); got != 1 {
		t.Fatalf("failures %v, want 1", got)
	}
	if sc.Last() != nil {
		t.Fatalf("last %+v after a failure", sc.Last())
	}

	sc.wrap = func(w io.Writer) io.Writer { return &fullWriter{w: w, room: 50} }
	clk.Advance(time.Hour)
	if got := dirNames(t, dir); len(got) != 0 {
		t.Fatalf("a full disk left %v", got)
	}
	if got := testutil.ToFloat64(sc.m.failures); got != 2 {
		t.Fatalf("failures %v, want 2", got)
	}

	sc.wrap = nil
	clk.Advance(time.Hour)
	if got := snapNames(t, dir); len(got) != 1 || len(dirNames(t, dir)) != 1 {
		t.Fatalf("the disk back: %v", dirNames(t, dir))
	}
	if l := sc.Last(); l == nil || l.Index != 1 {
		t.Fatalf("last %+v", l)
	}
}

// flipWriter changes the byte at offset at.
type flipWriter struct {
	w   io.Writer
	at  int64
	off int64
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if f.at >= f.off && f.at < f.off+int64(len(p)) {
		p = append([]byte(nil), p...)
		p[f.at-f.off] ^= 0x20
	}
	f.off += int64(len(p))
	return f.w.Write(p)
}

// fullWriter is a disk with room for room bytes.
type fullWriter struct {
	w    io.Writer
	room int
}

func (f *fullWriter) Write(p []byte) (int, error) {
	if len(p) > f.room {
		n, _ := f.w.Write(p[:f.room])
		f.room = 0
		return n, &os.PathError{Op: "write", Path: "snapshot", Err: syscall.ENOSPC}
	}
	f.room -= len(p)
	return f.w.Write(p)
}

// The configuration is checked.
func TestSnapshotScheduleRefusesBadConfig(t *testing.T) {
	src := newFakeSnapSource(t, clock.Real{})
	for _, c := range []SnapshotSchedule{{Dir: t.TempDir()}, {Interval: time.Hour}, {Interval: time.Hour, Dir: t.TempDir(), Retain: -1}} {
		if _, err := newSnapshotScheduler(c, src, "m1", hclog.NewNullLogger()); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if !errors.Is(func() error {
		_, err := newSnapshotScheduler(SnapshotSchedule{Interval: time.Hour, Dir: "/dev/null/x"}, src, "m1", hclog.NewNullLogger())
		return err
	}(), syscall.ENOTDIR) {
		t.Error("a directory that cannot be made was accepted")
	}
}
