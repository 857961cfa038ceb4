package admin

// Scheduled snapshots (agent --snapshot-interval, --snapshot-dir,
// --snapshot-retain): the leader writes a snapshot file into a directory
// of its own disk every interval, taken as `baton snapshot save` takes
// one (snapshotPoint, the same writer), reads it back with the file
// reader before it gets its name, and keeps the newest few. The names,
// the listing and the retention are cluster/snapdir's, shared with
// `baton snapshot save --dir`.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/cluster/snapdir"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/fsutil"
	"github.com/baton-dev/baton/internal/promkit"
	"github.com/baton-dev/baton/raftfsm"
)

// DefaultSnapshotRetain is how many scheduled snapshots are kept when
// SnapshotSchedule.Retain is 0.
const DefaultSnapshotRetain = 5

// snapshotTimeout bounds finding the linearizable point of one scheduled
// snapshot (a quorum's confirmation); the write itself is not bounded.
const snapshotTimeout = 30 * time.Second

// snapshotLeaderPoll is how often a master that does not lead looks again
// whether it does (at most the interval): a new leader takes up the
// schedule within it.
const snapshotLeaderPoll = time.Second

// SnapshotSchedule configures scheduled snapshots (Config.Snapshots).
type SnapshotSchedule struct {
	// Interval between two snapshots; must be positive.
	Interval time.Duration
	// Dir receives the files, baton-<cluster id>-<UTC time>-<index>.snap;
	// created 0700 if missing. Nothing else in it is touched.
	Dir string
	// Retain is how many of those files are kept (0: DefaultSnapshotRetain).
	Retain int
	// Clock drives the schedule. Default real.
	Clock clock.Clock
	// Metrics receives the baton_snapshot_* series (nil: none).
	Metrics prometheus.Registerer
}

// LastSnapshot describes the newest good scheduled snapshot of this
// master.
type LastSnapshot struct {
	File     string // path
	Time     time.Time
	Index    uint64
	Bytes    int64
	Duration time.Duration // 0 for one found in the directory at start
}

// snapshotSource is what the scheduler takes snapshots of: the admin
// Server (a fake in its tests).
type snapshotSource interface {
	IsLeader() bool
	snapshotPoint(ctx context.Context, takenBy string) (snapshotAt, error)
}

// IsLeader says whether this master leads (snapshotSource).
func (s *Server) IsLeader() bool { return s.b.IsLeader() }

type snapshotMetrics struct {
	lastTime, lastIndex, lastBytes, lastDuration prometheus.Gauge
	failures                                     prometheus.Counter
}

func newSnapshotMetrics(reg prometheus.Registerer) (*snapshotMetrics, error) {
	set := promkit.NewSet(reg)
	m := &snapshotMetrics{
		lastTime:     set.Gauge("snapshot", "last_success_timestamp_seconds", "Unix time of this master's newest good scheduled snapshot (written and verified); 0 before any."),
		lastIndex:    set.Gauge("snapshot", "last_success_index", "Raft index the newest good scheduled snapshot reflects."),
		lastBytes:    set.Gauge("snapshot", "last_success_size_bytes", "Size of the newest good scheduled snapshot's file."),
		lastDuration: set.Gauge("snapshot", "last_success_duration_seconds", "How long the newest good scheduled snapshot took: the read point, the write, the fsync and the read-back."),
		failures:     set.Counter("snapshot", "failures_total", "Scheduled snapshots that failed: not written (a full or unwritable disk), or refused by the read-back; none is left behind."),
	}
	return m, set.Err()
}

// snapshotScheduler runs the schedule on one master: each due tick, if
// this master leads, it writes a snapshot, then applies the retention.
type snapshotScheduler struct {
	cfg SnapshotSchedule
	src snapshotSource
	// takenBy is the principal the files' headers name: master/<id>.
	takenBy string
	log     hclog.Logger
	m       *snapshotMetrics
	// wrap, set by tests, wraps the file's writer (a disk that fills up,
	// a byte that turns).
	wrap func(io.Writer) io.Writer

	mu      sync.Mutex
	timer   clock.Timer
	stopped bool
	last    *LastSnapshot
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// newSnapshotScheduler checks cfg, creates the directory if missing and
// takes the newest file in it as the last good snapshot.
func newSnapshotScheduler(cfg SnapshotSchedule, src snapshotSource, selfID string, log hclog.Logger) (*snapshotScheduler, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("admin: snapshot interval %v: want a positive duration", cfg.Interval)
	}
	if cfg.Dir == "" {
		return nil, errors.New("admin: scheduled snapshots need a directory")
	}
	if cfg.Retain < 0 {
		return nil, fmt.Errorf("admin: snapshot retain %d: want at least 1", cfg.Retain)
	}
	if cfg.Retain == 0 {
		cfg.Retain = DefaultSnapshotRetain
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if err := os.MkdirAll(cfg.Dir, fsutil.PrivateDirMode); err != nil {
		return nil, fmt.Errorf("admin: snapshot directory: %w", err)
	}
	m, err := newSnapshotMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	sc := &snapshotScheduler{cfg: cfg, src: src, takenBy: "master/" + selfID, log: log.Named("snapshots"), m: m}
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	files, err := snapdir.List(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("admin: snapshot directory: %w", err)
	}
	if n := len(files); n > 0 {
		// Every file of the pattern was verified before it got its name.
		f := files[n-1]
		last := &LastSnapshot{File: f.Path, Time: f.At, Index: f.Index}
		if st, err := os.Stat(f.Path); err == nil {
			last.Bytes = st.Size()
		}
		sc.setLast(last)
	}
	return sc, nil
}

// start arms the first tick at once.
func (sc *snapshotScheduler) start() { sc.arm(0) }

// stop cancels the schedule and waits for a snapshot under way.
func (sc *snapshotScheduler) stop() {
	sc.mu.Lock()
	sc.stopped = true
	if sc.timer != nil && sc.timer.Stop() {
		sc.running.Done() // the tick that will not run
	}
	sc.mu.Unlock()
	sc.cancel()
	sc.running.Wait()
}

func (sc *snapshotScheduler) arm(d time.Duration) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.stopped {
		return
	}
	sc.running.Add(1)
	sc.timer = sc.cfg.Clock.AfterFunc(d, func() {
		defer sc.running.Done()
		sc.tick()
	})
}

// Last is the newest good scheduled snapshot, nil if none.
func (sc *snapshotScheduler) Last() *LastSnapshot {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.last == nil {
		return nil
	}
	l := *sc.last
	return &l
}

func (sc *snapshotScheduler) setLast(l *LastSnapshot) {
	sc.mu.Lock()
	sc.last = l
	sc.mu.Unlock()
	sc.m.lastTime.Set(float64(l.Time.UnixMilli()) / 1000)
	sc.m.lastIndex.Set(float64(l.Index))
	sc.m.lastBytes.Set(float64(l.Bytes))
	sc.m.lastDuration.Set(l.Duration.Seconds())
}

// tick takes a snapshot when this master leads and the interval has passed
// since the newest one (its own, or the newest in the directory: a master
// that led before, or a directory the masters share, goes on from there
// rather than taking one at once after a failover), then arms the next.
func (sc *snapshotScheduler) tick() {
	poll := min(sc.cfg.Interval, snapshotLeaderPoll)
	if !sc.src.IsLeader() {
		sc.arm(poll)
		return
	}
	now := sc.cfg.Clock.Now()
	if l := sc.Last(); l != nil {
		if due := l.Time.Add(sc.cfg.Interval); now.Before(due) {
			// Leadership may go meanwhile: look again by then.
			sc.arm(due.Sub(now))
			return
		}
	}
	if err := sc.takeOne(); err != nil {
		if errors.Is(err, errNotLeading) {
			sc.arm(poll)
			return
		}
		sc.m.failures.Inc()
		sc.log.Error("scheduled snapshot failed; trying again at the next interval", "dir", sc.cfg.Dir, "retry_in", sc.cfg.Interval, "error", err)
	}
	sc.arm(sc.cfg.Interval)
}

// errNotLeading: leadership went before the read point; not a failure.
var errNotLeading = errors.New("not the leader")

// takeOne writes one snapshot: the read point, the file written under a
// temporary name in the directory, fsynced, read back whole with the file
// reader, and only then linked to its name (snapdir.Create), so that every
// file of the pattern was verified; one that fails is removed, whatever
// the cause.
func (sc *snapshotScheduler) takeOne() error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(sc.ctx, snapshotTimeout)
	pt, err := sc.src.snapshotPoint(ctx, sc.takenBy)
	cancel()
	if err != nil {
		if !sc.src.IsLeader() {
			return errNotLeading
		}
		return fmt.Errorf("reading the state: %w", err)
	}
	at := time.UnixMilli(pt.header.CreatedUnixMs)
	index := pt.view.Index()
	// snapdir.Create, as `snapshot save --dir` writes: never over a file
	// of the same name (a save into this directory in the same second).
	var size int64
	path, err := snapdir.Create(sc.cfg.Dir, fsutil.PrivateFileMode, func(f *os.File) (snapdir.Header, error) {
		name := snapdir.Name(pt.header.ClusterID, at, index)
		var w io.Writer = f
		if sc.wrap != nil {
			w = sc.wrap(w)
		}
		bw := bufio.NewWriterSize(w, 256<<10)
		if err := pt.write(bw); err != nil {
			return snapdir.Header{}, fmt.Errorf("writing %s: %w", name, err)
		}
		if err := bw.Flush(); err != nil {
			return snapdir.Header{}, fmt.Errorf("writing %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return snapdir.Header{}, fmt.Errorf("writing %s: sync: %w", name, err)
		}
		if err := sc.verify(f.Name(), pt, &size); err != nil {
			return snapdir.Header{}, err
		}
		return snapdir.Header{ClusterID: pt.header.ClusterID, At: at, Index: index}, nil
	})
	if err != nil {
		return err
	}
	last := &LastSnapshot{File: path, Time: at, Index: index, Bytes: size, Duration: time.Since(start)}
	sc.setLast(last)
	sc.log.Info("scheduled snapshot written and verified", "file", path, "index", last.Index, "term", pt.header.Term,
		"bytes", size, "took", last.Duration)
	sc.retain(path)
	return nil
}

// verify reads the file back through a descriptor of its own, as a
// restore would read it, and checks that it holds what was written.
func (sc *snapshotScheduler) verify(tmp string, pt snapshotAt, size *int64) error {
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("reading back: %w", err)
	}
	defer f.Close()
	h, err := raftfsm.VerifySnapshotFile(f)
	if err != nil {
		return fmt.Errorf("the file written does not read back, removed: %w", err)
	}
	v := pt.view
	if h.Index != v.Index() || h.Procs != uint64(v.NumProcs()) || h.Keys != uint64(v.NumKeys()) || h.ClusterID != pt.header.ClusterID {
		return fmt.Errorf("the file written reads back as index %d, %d procedures, %d keys, cluster %q; written were index %d, %d procedures, %d keys, cluster %q: removed",
			h.Index, h.Procs, h.Keys, h.ClusterID, v.Index(), v.NumProcs(), v.NumKeys(), pt.header.ClusterID)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading back: %w", err)
	}
	*size = st.Size()
	return nil
}

// retain removes the oldest scheduled snapshots beyond Retain, never
// keep (the one just written, whatever the clock says of the others).
func (sc *snapshotScheduler) retain(keep string) {
	if _, err := snapdir.Prune(sc.cfg.Dir, sc.cfg.Retain, keep); err != nil {
		sc.log.Warn("snapshot retention", "dir", sc.cfg.Dir, "error", err)
	}
}

// LastSnapshot is this master's newest good scheduled snapshot: nil when
// none is scheduled or none was written yet.
func (s *Server) LastSnapshot() *LastSnapshot {
	if s.snapshots == nil {
		return nil
	}
	return s.snapshots.Last()
}
