package store

// WAL: a rolling write-ahead log of procedure images, after HBase's
// WALProcedureStore.
//
// Files. The directory holds segment files pv2-<id>.log (id: 20 digits,
// increasing), a LOCK file (flock, one WAL per directory), and possibly
// pv2-<id>.log.damaged files: segments that held corrupt records, moved aside
// (never deleted) once everything readable in them had been superseded. The
// format is described in format.go.
//
// Writes. Every Append is one record: it is encoded and checksummed in the
// caller's goroutine, then handed to a single writer goroutine. The writer
// takes every record that is waiting (up to MaxBatchBytes), writes them with
// one write(2), calls fdatasync once and releases all their writers: group
// commit. Batches adapt to load with no timer: a lone writer is written and
// synced at once; while an fdatasync is in progress, other writers queue up
// and all of them share the next one. MaxBatchWait can add a linger for
// devices where a sync is so cheap that batches stay small.
//
// Sync modes (WALConfig.Sync). SyncEveryBatch, the default, is the above:
// Append returns once its record is on stable storage. It is what a
// procedure executor without Raft relies on. SyncOnRoll is for a WAL that
// only accelerates restarts of a state kept durable elsewhere (raftfsm: the
// Raft log and snapshots are the source of truth): Append returns once its
// record is written (write(2)), not synced. The current segment is
// fdatasync'ed
//
//   - when it is rolled, with its trailer, before the next segment is
//     created: every segment but the newest is therefore whole on disk;
//   - before any older segment is deleted (or renamed aside as damaged):
//     a segment is deleted because newer records superseded it, and those
//     may sit unsynced in the current segment, so they are made durable
//     before the old copy goes (this covers merges as well);
//   - every SyncInterval (default 1 s) while it holds unsynced records,
//     which bounds how much a power loss can take;
//   - on Sync and on Close.
//
// DurableIndex is the highest external index known synced; Index the
// highest written. A process crash loses nothing (written data is in the
// page cache, and Load syncs the newest segment before appending again). A
// power loss or kernel crash can lose a suffix of the newest segment, and
// since the kernel writes pages back in any order, what is left past the
// last synced byte may be cut short, zeros, stale or garbage data, or even
// later records after a hole. Segments created in this mode carry a header
// flag (format.go) that makes Load treat any bad record of the newest
// segment as a torn tail: it is truncated at the first bad record, so the
// WAL always loads as a consistent prefix of what was appended, and the
// loaded Index is that of the last intact record (never less than
// DurableIndex at the time of the loss). Nothing in an older segment can be
// lost that way, so damage there is still reported as damage.
//
// Rolling. When the current segment exceeds SegmentSize, or is older than
// RollInterval and holds records, the writer appends the segment's tracker
// as a trailer, syncs and closes it, and creates the next segment (header
// written to a .tmp file, synced, renamed, directory synced, so a crash never
// leaves a half-created segment behind).
//
// Cleanup. Each segment has a tracker (tracker.go) of the ids it modified and
// deleted. For the oldest segment the writer keeps a holding set: the ids for
// which the oldest segment holds the latest image. Every put or delete in a
// newer segment clears the id from it. When the holding set is empty the
// oldest segment is deleted (a damaged one is renamed to .damaged instead),
// the holding set is recomputed for the next oldest, and so on.
//
// Merges. Segments pinned by a few live images (a region's record written
// once, a procedure suspended for long) would stay for ever, so when more
// than MaxSegments segments are live, or more than two and their bytes
// exceed 1.5 times the live images' (so a WAL's size follows its live data,
// not MaxSegments×SegmentSize), cleanup merges a run of consecutive closed
// segments into one file (wal_cleanup.go). It picks the run by cost and
// benefit: the bytes (and, past MaxSegments, the files) it frees against
// the bytes it copies and reads; a run must free at least what it copies,
// so dense segments are left alone. The current segment and the newest
// closed one are never merged (their short-lived images are still dying).
// The writer works out from the trackers what the run must keep: the ids
// whose latest image it holds (images newer segments superseded are
// dropped), and its deletes of ids that an older file, the run's own
// included, may still hold an image of (the others are dropped). A
// background goroutine reads those images from the run's files and writes
// them, the deletes and a trailer to a temporary file, synced; the writer
// then syncs the current segment (the records that superseded the dropped
// images must be durable first), renames the output over the run's last
// segment (it takes that segment's id: its place in the log's order) and
// removes the run's other files. A crash at any step loads the same
// state: the output says what the run said about every id no newer
// segment settles, and keeps every delete an older file could undo. So a
// merged cold image stays where it was, behind the appends, and is not
// copied again unless its segment turns sparse; HBase's straggler rewrite,
// which this replaces, re-appended the oldest segment's stragglers to the
// current one, bringing cold images back to the front of the log to be
// copied again a few segments later (at a million regions it wrote more
// than the appends did).
//
// Merges are paid for by appends: rewriteCreditPercent (150) bytes per 100
// bytes appended, banked up to what one segment of appends earns. Each
// merge spends what it wrote, and one starts only while the credit is
// positive. Consequences:
//
//   - An idle WAL writes nothing: once appends stop, cleanup spends what
//     credit is left (at most 1.5 segments, plus one merge) and stops.
//     Age rolls skip a segment that holds no appends.
//   - Cleanup writes at most 1.5 bytes per byte appended, plus one merge
//     and the bank; with cold images merged once and left alone, far less
//     (BenchmarkWALColdGrowth: 0.09 bytes per byte appended where the
//     straggler rewrite wrote 0.62–0.65; at 1 M regions 107 bytes per
//     region where it wrote 709).
//   - The segments stay within about twice the live images' bytes plus the
//     two segments cleanup leaves alone: past twice (pressedPercent),
//     runs that copy more than they free are merged too.
//   - MaxSegments is a soft limit. Past it, plus a file per eighth of a
//     segment of live images (fileLimit: files of cold images are not
//     merged again only to save files), merges also count the files they
//     remove, as long as the runs' live images fit a segment; live images
//     beyond MaxSegments×SegmentSize need more segments, and are logged
//     once as a warning with the figures (re-armed when they fall under
//     half of it). BenchmarkWALCleanupWrites measures the count under
//     churn.
//
// Loading. Load reads the segments newest first. A segment whose trailer
// shows that every image it holds was superseded by newer segments is not
// read beyond its trailer. Other segments are read whole and replayed; within
// a segment the last record wins, and an id settled by a newer segment is
// left alone. A torn tail in the newest segment (incomplete frame, bad last
// frame, or zeros) is truncated at the last good record and reported as a
// Corruption with reason "torn tail truncated". Any other damage stops the
// reading of that segment (what came before is used), is reported with file
// and offset, and marks the segment damaged so that it is never deleted.
// Segments without a trailer (crash before roll) get their tracker rebuilt
// from the replay. After Load the WAL always appends to a new segment: a
// segment is written by exactly one process lifetime.

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/enumname"
	"github.com/baton-dev/baton/internal/fsutil"
)

// Defaults and limits of WALConfig.
const (
	DefaultSegmentSize   = 32 << 20
	DefaultRollInterval  = time.Hour
	DefaultMaxSegments   = 10
	DefaultMaxBatchWait  = 0
	DefaultMaxBatchBytes = 4 << 20

	DefaultSyncInterval = time.Second

	MinSegmentSize  = 1 << 10
	MaxMaxBatchWait = 100 * time.Millisecond
)

// SyncMode says when a WAL syncs its appends (WALConfig.Sync).
type SyncMode uint8

const (
	// SyncDefault selects the default of whoever builds the configuration:
	// SyncEveryBatch for the store package, SyncOnRoll for raftfsm.
	SyncDefault SyncMode = iota
	// SyncEveryBatch: every group commit ends in an fdatasync; Append
	// returns once its record is durable.
	SyncEveryBatch
	// SyncOnRoll: appends are written but not synced one by one; the
	// current segment is synced when rolled, before older segments are
	// deleted, every SyncInterval, on Sync and on Close. A power loss can
	// lose a suffix of the newest segment (never more than was written
	// after DurableIndex); the WAL still loads as a consistent prefix.
	SyncOnRoll
)

// String is the mode's name, as logs and errors print it.
func (m SyncMode) String() string { return enumname.Format(m, syncModeNames, "SyncMode(%d)") }

var syncModeNames = []string{SyncDefault: "default", SyncEveryBatch: "every-batch", SyncOnRoll: "on-roll"}

// WALConfig configures a WAL. A zero value in any field but Dir selects that
// field's default.
type WALConfig struct {
	// Dir is the directory of the segment files; created if missing.
	// Required. One WAL per directory (enforced with a lock file).
	Dir string

	// SegmentSize is the size in bytes past which the current segment is
	// rolled. Default 32 MiB (DefaultSegmentSize), minimum 1 KiB. Smaller
	// segments are cleaned up sooner (less disk, less to replay after all
	// their procedures finished) but roll more often, and each roll costs a
	// trailer, two syncs and a directory sync.
	SegmentSize int64

	// RollInterval rolls a segment that holds records once it is this old,
	// so that a slow trickle of writes still lets old segments be cleaned up.
	// Default 1 h. Shorter intervals bound disk use on idle systems better but
	// create more small segments.
	RollInterval time.Duration

	// MaxSegments is the number of live segments beyond which cleanup merges
	// runs of segments into one file, keeping only their live images, to
	// bring the count down; large live data raises it by a segment per
	// eighth of a segment of live images. Default 10. Lower values bound
	// the files, and the trackers held for them, more tightly but copy
	// long-lived images more often. It is a soft limit: merges are paid for
	// by appends (at most 1.5 bytes written per byte appended), and a
	// merge's live images must fit in a segment, so when the live
	// procedures need more segments the count grows past it (see the top
	// of wal.go).
	MaxSegments int

	// NoSync skips fdatasync and directory syncs. For tests and benchmarks
	// only: with it a machine crash can lose acknowledged writes.
	NoSync bool

	// Sync selects when appends are synced: SyncEveryBatch (the default)
	// makes every Append durable before it returns; SyncOnRoll only writes
	// them and syncs at roll, before deleting old segments, every
	// SyncInterval, on Sync and on Close. See the top of wal.go.
	Sync SyncMode

	// SyncInterval bounds, under SyncOnRoll, how long written records stay
	// unsynced. Default 1 s (DefaultSyncInterval). Ignored otherwise.
	SyncInterval time.Duration

	// MaxBatchWait is how long the writer lingers, after taking every record
	// already queued, for writers that have entered Append but not yet queued
	// their record. Default 0 (no linger): group commit needs no timer, since
	// writers arriving during one fdatasync are batched into the next, so
	// batches grow with load by themselves and a lone writer never waits.
	// A small linger (a few hundred µs) can raise records per sync on devices
	// whose sync is very cheap, at the cost of that much latency per write.
	// At most 100 ms (MaxMaxBatchWait).
	MaxBatchWait time.Duration

	// MaxBatchBytes caps the bytes written per group commit, so one sync
	// does not wait for an unbounded amount of data. Default 4 MiB.
	MaxBatchBytes int

	// Logger receives the WAL's log lines. Default hclog.NewNullLogger().
	Logger hclog.Logger

	// Now returns the current time; tests set it to drive age-based rolling.
	// Default time.Now.
	Now func() time.Time

	// SyncData, if set, replaces fdatasync for segment data (fault
	// injection in tests: a device whose fsync fails). Default: fdatasync.
	SyncData func(*os.File) error
}

// DefaultWALConfig returns the default configuration for a WAL in dir.
func DefaultWALConfig(dir string) WALConfig {
	return WALConfig{
		Dir:           dir,
		SegmentSize:   DefaultSegmentSize,
		RollInterval:  DefaultRollInterval,
		MaxSegments:   DefaultMaxSegments,
		MaxBatchWait:  DefaultMaxBatchWait,
		MaxBatchBytes: DefaultMaxBatchBytes,
		Sync:          SyncEveryBatch,
		SyncInterval:  DefaultSyncInterval,
		Logger:        hclog.NewNullLogger(),
		Now:           time.Now,
	}
}

// Validate reports every field of c that is out of range.
func (c WALConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("store: WALConfig.Dir is empty"))
	}
	if c.SegmentSize < 0 || (c.SegmentSize > 0 && c.SegmentSize < MinSegmentSize) {
		errs = append(errs, fmt.Errorf("store: WALConfig.SegmentSize %d is below the minimum of %d bytes (0 selects %d)",
			c.SegmentSize, MinSegmentSize, DefaultSegmentSize))
	}
	if c.RollInterval < 0 {
		errs = append(errs, fmt.Errorf("store: WALConfig.RollInterval %v is negative (0 selects %v)", c.RollInterval, DefaultRollInterval))
	}
	if c.MaxSegments < 0 {
		errs = append(errs, fmt.Errorf("store: WALConfig.MaxSegments %d is negative (0 selects %d)", c.MaxSegments, DefaultMaxSegments))
	}
	if c.MaxBatchWait < 0 || c.MaxBatchWait > MaxMaxBatchWait {
		errs = append(errs, fmt.Errorf("store: WALConfig.MaxBatchWait %v is outside [0, %v]", c.MaxBatchWait, MaxMaxBatchWait))
	}
	if c.MaxBatchBytes < 0 {
		errs = append(errs, fmt.Errorf("store: WALConfig.MaxBatchBytes %d is negative (0 selects %d)", c.MaxBatchBytes, DefaultMaxBatchBytes))
	}
	if c.Sync > SyncOnRoll {
		errs = append(errs, fmt.Errorf("store: WALConfig.Sync %v is not a sync mode", c.Sync))
	}
	if c.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("store: WALConfig.SyncInterval %v is negative (0 selects %v)", c.SyncInterval, DefaultSyncInterval))
	}
	return errors.Join(errs...)
}

func (c WALConfig) withDefaults() WALConfig {
	d := DefaultWALConfig(c.Dir)
	defaults.Set(&c.SegmentSize, d.SegmentSize)
	defaults.Set(&c.RollInterval, d.RollInterval)
	defaults.Set(&c.MaxSegments, d.MaxSegments)
	defaults.Set(&c.MaxBatchBytes, d.MaxBatchBytes)
	defaults.Set(&c.Sync, d.Sync)
	defaults.Set(&c.SyncInterval, d.SyncInterval)
	defaults.Set(&c.Logger, d.Logger)
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Batch is one atomic record: after a crash either all of it loads or none.
// Puts (Inserts, then Updates) are applied before Deletes.
type Batch struct {
	Inserts []Proc
	Updates []Proc
	Deletes []uint64
	// Index is an optional external index (the Raft log index) stored with
	// the record; 0 means none. Load reports the highest one seen.
	Index uint64
}

func (b *Batch) empty() bool {
	return len(b.Inserts) == 0 && len(b.Updates) == 0 && len(b.Deletes) == 0
}

// WALStats are counters of a WAL since it was opened.
type WALStats struct {
	Records             uint64 // data records written (merges' included)
	Syncs               uint64 // group commits (writes); under SyncEveryBatch each ends in one fdatasync unless NoSync
	DataSyncs           uint64 // fdatasyncs of segment data, roll and Sync included (counted, not made, under NoSync)
	Bytes               uint64 // bytes written, trailers and headers included
	Rolls               uint64 // segments rolled
	Segments            int    // live segments, the current one included
	SegmentBytes        int64  // size of the live segments on disk
	SegmentsDeleted     uint64 // segments removed by cleanup (damaged ones renamed aside count too)
	StragglersRewritten uint64 // live images copied by merges
	RewriteBytes        uint64 // bytes of the files merges wrote (part of Bytes)
	Live                int    // live procedures
	LiveBytes           int64  // encoded size of the latest images of the live procedures
}

// RecordsPerSync is the mean number of records carried by one group commit.
func (s WALStats) RecordsPerSync() float64 {
	if s.Syncs == 0 {
		return 0
	}
	return float64(s.Records) / float64(s.Syncs)
}

type segment struct {
	id            uint64
	name          string
	path          string
	hdr           segHeader
	tr            *tracker
	size          int64
	records       uint64   // data records; in the current segment, all written by Append
	damaged       bool     // corrupt records found at load: never deleted
	rewriteFailed bool     // a merge of it failed: never merged again
	dirty         bool     // written since its last fdatasync (current segment)
	f             *os.File // open for appending: current segment only
}

type request struct {
	frame    []byte
	b        Batch
	syncOnly bool // a Sync call: no record, sync the current segment
	done     chan error
}

var reqPool = sync.Pool{New: func() any { return &request{done: make(chan error, 1)} }}

// WAL is the durable Store: a rolling log of segment files. See the comment
// at the top of wal.go for its design.
type WAL struct {
	cfg  WALConfig
	log  hclog.Logger
	lock *os.File

	loadMu sync.Mutex   // serialises Load and Close
	mu     sync.RWMutex // guards loaded/closed; Append holds it shared while queueing
	loaded bool
	closed bool

	files  []segFile // segment files found by OpenWAL, ascending id
	nextID uint64

	reqCh chan *request
	// rewriteCh is unbuffered: a merge's goroutine hands its result to a
	// running writer or, once the WAL stops, removes its output; a buffer
	// would take the result from a writer that had gone, leaving the output.
	rewriteCh chan compactResult
	writerCh  chan func() // inWriter: functions run by the writer goroutine
	stopCh    chan struct{}
	doneCh    chan struct{}
	bg        sync.WaitGroup
	pending   atomic.Int64 // Appends started and not yet answered by the writer
	closeErr  error

	// Owned by the writer goroutine once Load has returned.
	segs      []*segment // live segments, oldest first; the last is current
	holding   *idSet     // ids whose latest image the oldest segment holds (len(segs) > 1)
	liveSizes *sizeMap   // encoded size of the latest image of each live id
	liveBytes int64      // sum of liveSizes
	maxID     uint64
	failed    error
	failedPub atomic.Pointer[error] // failed, for Err (written once, by the writer)
	rewriting bool                  // a compaction is in flight
	// segsGen counts changes to the segments (rolls, removals, merges);
	// pickedAt is the generation at which cleanup last found no run worth
	// merging, so that it does not look again until they change.
	segsGen, pickedAt uint64
	// rewriteCredit is how many bytes merges may still write: appends
	// earn it (rewriteCreditPercent, up to a cap), each merge spends
	// what it wrote. A merge starts only while it is positive, so an idle
	// WAL writes nothing, and cleanup writes at most
	// rewriteCreditPercent/100 bytes per byte appended (plus one merge and
	// the cap).
	rewriteCredit int64
	// overLimitWarned: the live images were found to exceed what MaxSegments
	// segments hold and this was logged; cleared once they are back under
	// half of it, so a workload hovering at the limit warns once.
	overLimitWarned bool
	buf             []byte
	written         uint64 // highest external index written (writer goroutine)

	// testHook, if set before Load, is called by the writer with ("sync",
	// file) after each fdatasync of segment data and ("remove", file) after
	// a superseded segment is removed or renamed aside; a merge started
	// with it set calls it with ("map", file) once it mapped a run's file.
	testHook func(op, file string)

	index        atomic.Uint64
	durable      atomic.Uint64
	nDataSyncs   atomic.Uint64
	nRecords     atomic.Uint64
	nSyncs       atomic.Uint64
	nBytes       atomic.Uint64
	nRolls       atomic.Uint64
	nSegments    atomic.Int64
	nSegBytes    atomic.Int64
	nSegmentsDel atomic.Uint64
	nStragglers  atomic.Uint64
	nRewriteB    atomic.Uint64
	nLive        atomic.Int64
	nLiveBytes   atomic.Int64
}

var _ Store = (*WAL)(nil)

type segFile struct {
	id   uint64
	name string
}

const segPrefix, segSuffix = "pv2-", ".log"

func segName(id uint64) string { return fmt.Sprintf("pv2-%020d.log", id) }

// parseSegName parses pv2-<20 digits>.log, returning the id and the rest of
// the name after ".log".
func parseSegName(name string) (uint64, string, bool) {
	if !strings.HasPrefix(name, segPrefix) || len(name) < len(segPrefix)+20+len(segSuffix) {
		return 0, "", false
	}
	digits := name[len(segPrefix) : len(segPrefix)+20]
	rest := name[len(segPrefix)+20:]
	if !strings.HasPrefix(rest, segSuffix) {
		return 0, "", false
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return id, rest[len(segSuffix):], true
}

// OpenWAL opens (creating if needed) the WAL in cfg.Dir and locks the
// directory. It lists the segments but does not read them: call Load once
// before writing.
func OpenWAL(cfg WALConfig) (*WAL, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// Private: the log is the state, which no other local user may read.
	if err := fsutil.MkdirPrivate(cfg.Dir); err != nil {
		return nil, fmt.Errorf("store: create WAL dir: %w", err)
	}
	lock, err := lockDir(filepath.Join(cfg.Dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	w := &WAL{
		cfg:       cfg,
		log:       cfg.Logger.Named("wal"),
		lock:      lock,
		nextID:    1,
		reqCh:     make(chan *request, 4096),
		rewriteCh: make(chan compactResult),
		writerCh:  make(chan func()),
		stopCh:    make(chan struct{}),
		doneCh:    make(chan struct{}),
		holding:   &idSet{},
		liveSizes: newSizeMap(),
	}
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: list WAL dir: %w", err)
	}
	for _, e := range entries {
		id, rest, ok := parseSegName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if id >= w.nextID {
			w.nextID = id + 1
		}
		switch rest {
		case "":
			w.files = append(w.files, segFile{id: id, name: e.Name()})
		case ".tmp":
			// A segment whose creation did not complete; it never held records.
			w.log.Info("removing incomplete segment", "file", e.Name())
			if err := os.Remove(filepath.Join(cfg.Dir, e.Name())); err != nil {
				lock.Close()
				return nil, fmt.Errorf("store: remove %s: %w", e.Name(), err)
			}
		}
	}
	slices.SortFunc(w.files, func(a, b segFile) int { return cmp.Compare(a.id, b.id) })
	return w, nil
}

// Index returns the highest external index written or loaded. Under
// SyncOnRoll it may be ahead of DurableIndex.
func (w *WAL) Index() uint64 { return w.index.Load() }

// DurableIndex returns the highest external index known to be on stable
// storage: the index loaded, then advanced by every sync of the current
// segment (each group commit under SyncEveryBatch; roll, SyncInterval, Sync
// and Close under SyncOnRoll). A power loss cannot take the WAL below it.
// With NoSync the skipped syncs count as done.
func (w *WAL) DurableIndex() uint64 { return w.durable.Load() }

// Stats returns the WAL's counters.
func (w *WAL) Stats() WALStats {
	return WALStats{
		Records:             w.nRecords.Load(),
		Syncs:               w.nSyncs.Load(),
		DataSyncs:           w.nDataSyncs.Load(),
		Bytes:               w.nBytes.Load(),
		Rolls:               w.nRolls.Load(),
		Segments:            int(w.nSegments.Load()),
		SegmentBytes:        w.nSegBytes.Load(),
		SegmentsDeleted:     w.nSegmentsDel.Load(),
		StragglersRewritten: w.nStragglers.Load(),
		RewriteBytes:        w.nRewriteB.Load(),
		Live:                int(w.nLive.Load()),
		LiveBytes:           w.nLiveBytes.Load(),
	}
}

// Insert implements Store.
func (w *WAL) Insert(proc Proc, children []Proc) error {
	ps := make([]Proc, 0, 1+len(children))
	return w.Append(Batch{Inserts: append(append(ps, proc), children...)})
}

// Update implements Store.
func (w *WAL) Update(proc Proc) error {
	return w.Append(Batch{Updates: []Proc{proc}})
}

// Delete implements Store.
func (w *WAL) Delete(ids []uint64) error {
	return w.Append(Batch{Deletes: ids})
}

// Append writes b as one atomic record. Under SyncEveryBatch it returns once
// the record is durable; under SyncOnRoll once it is written (see Sync).
func (w *WAL) Append(b Batch) error {
	for _, ps := range [2][]Proc{b.Inserts, b.Updates} {
		for _, p := range ps {
			if p.ID == 0 {
				return fmt.Errorf("%w: proc id 0", ErrInvalid)
			}
		}
	}
	for _, id := range b.Deletes {
		if id == 0 {
			return fmt.Errorf("%w: delete of id 0", ErrInvalid)
		}
	}
	puts := [2][]Proc{b.Inserts, b.Updates}
	size := recordSize(b.Index, puts, b.Deletes)
	if size > maxPayload {
		return fmt.Errorf("%w: record of %d bytes exceeds %d", ErrInvalid, size, maxPayload)
	}
	if b.empty() && b.Index == 0 {
		w.mu.RLock()
		defer w.mu.RUnlock()
		return w.stateErr()
	}
	w.pending.Add(1)
	r := reqPool.Get().(*request)
	frame := r.frame // empty: release
	if cap(frame) < frameHeaderSize+size {
		frame = make([]byte, 0, frameHeaderSize+size)
	}
	r.frame = appendRecord(frame, batchType(&b), b.Index, puts, b.Deletes)
	r.b = b
	return w.submit(r)
}

// Sync makes every record appended so far durable: it syncs the current
// segment if it holds unsynced records, and advances DurableIndex to
// Index. Under SyncEveryBatch there is nothing left to sync.
func (w *WAL) Sync() error {
	w.pending.Add(1)
	r := reqPool.Get().(*request)
	r.syncOnly = true // its frame is empty (release): the writer appends every request's
	return w.submit(r)
}

// submit hands r to the writer goroutine and waits for its answer; pending
// must already count r.
func (w *WAL) submit(r *request) error {
	w.mu.RLock()
	if err := w.stateErr(); err != nil {
		w.mu.RUnlock()
		w.pending.Add(-1)
		r.release()
		return err
	}
	w.reqCh <- r
	w.mu.RUnlock()
	err := <-r.done
	r.release()
	return err
}

// maxPooledFrame is the largest frame a pooled request keeps for the next
// Append: a master appends a record per Raft entry it applies, and a new
// frame for each was a tenth of what a crash recovery allocated on every
// master; a rare huge one is let go.
const maxPooledFrame = 1 << 20

// release returns r to the pool once the writer is done with it (it has
// answered r): its frame's room is kept, emptied. It is the pool's only
// way in, so every request taken from it has an empty frame: a Sync's
// request writes nothing, and an Append's builds its record from the
// start.
func (r *request) release() {
	r.frame = r.frame[:0]
	if cap(r.frame) > maxPooledFrame {
		r.frame = nil
	}
	r.b, r.syncOnly = Batch{}, false
	reqPool.Put(r)
}

func (w *WAL) stateErr() error {
	if w.closed {
		return ErrClosed
	}
	if !w.loaded {
		return ErrNotLoaded
	}
	return nil
}

// Close writes the current segment's trailer, closes the files and releases
// the directory lock. Writes after Close fail with ErrClosed.
func (w *WAL) Close() error {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	loaded := w.loaded
	w.mu.Unlock()
	var err error
	if loaded {
		close(w.reqCh)
		<-w.doneCh
		err = w.closeErr
	}
	if cerr := w.lock.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: release lock: %w", cerr)
	}
	return err
}
