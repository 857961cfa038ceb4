package raftfsm

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

// WAL id space. Procedure ids live in [1, walReservedBase). The FSM keeps
// its own images in the same WAL under ids at and above walReservedBase:
// walMetaID holds a WalMeta, and every live domain key has an image (a KV:
// key and value) under an id in (walMetaID, 2^64) that this node assigned
// sequentially when the key first appeared. Sequential ids keep the WAL's
// tracker dense (a tracker node covers 4096 consecutive ids; hashed ids would
// cost a 1 KiB node per key). The key → id mapping is local to a node: it is
// rebuilt from the images at load, never replicated, and an id may be reused
// after a restart once its key was deleted, which the WAL handles like any
// re-put of an id.
const (
	walReservedBase = uint64(1) << 63
	walMetaID       = walReservedBase
	firstKeyID      = walMetaID + 1
)

// Defaults of Config.
const (
	DefaultMaxWALRecordBytes = 64 << 20
	DefaultRestoreBatchBytes = 4 << 20
)

var (
	// ErrWALDamaged is returned by NewFSM when the local WAL has damage other
	// than a torn tail: its applied index can no longer be trusted to match
	// its contents. Move the directory aside; the node then recovers from
	// Raft (snapshot plus log).
	ErrWALDamaged = errors.New("raftfsm: local WAL damaged")
	// ErrClosed is returned by writes to a closed RaftStore or FSM.
	ErrClosed = errors.New("raftfsm: closed")
)

// Config configures an FSM.
type Config struct {
	// Dir is the FSM's data directory: it holds the CURRENT file and the
	// local WAL directories wal-<generation> (see restore.go). "" runs the
	// FSM in memory only, for tests: nothing survives a restart and
	// LoadedIndex is 0.
	Dir string

	// WAL is the template for the local WAL's configuration; its Dir is
	// ignored (the FSM picks the directory). Zero fields take the store
	// package's defaults, except Sync: store.SyncDefault selects
	// store.SyncOnRoll here, since the WAL only speeds up restarts and the
	// Raft log and snapshots hold everything it could lose (see the package
	// doc, The local WAL).
	WAL store.WALConfig

	// MaxWALRecordBytes bounds one WAL record written by ApplyBatch. A batch
	// of entries whose changes exceed it is written as several records, cut
	// at entry boundaries (each tagged with its last entry's index, so a
	// crash between them still leaves a consistent prefix). Default 64 MiB.
	MaxWALRecordBytes int

	// RestoreBatchBytes is the size of the WAL records written while
	// restoring a snapshot: bigger means fewer syncs, smaller bounds memory.
	// Default 4 MiB.
	RestoreBatchBytes int

	// Logger receives log lines. Default: a null logger.
	Logger hclog.Logger
}

func (c Config) withDefaults() Config {
	defaults.Positive(&c.MaxWALRecordBytes, DefaultMaxWALRecordBytes)
	defaults.Positive(&c.RestoreBatchBytes, DefaultRestoreBatchBytes)
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	return c
}

// state is one immutable version of the FSM's state. Apply builds the next
// version on clones of the persistent (copy-on-write) trees (tree.go) and
// publishes it with one atomic pointer swap: readers never lock and never see
// half an entry, and a snapshot is just a pointer to a version. A published
// version's trees are never modified again; they are only cloned.
type state struct {
	procs     *procTree // by id
	kv        *kvTree   // by key
	maxProcID uint64
	index     uint64 // Raft index of the last applied entry
}

func emptyState() *state {
	return &state{procs: newProcTree(), kv: newKVTree()}
}

// FSM is Baton's replicated state machine; it implements raft.FSM and
// raft.BatchingFSM. See the package documentation for its design.
//
// Raft calls Apply, ApplyBatch, Snapshot and Restore from one goroutine; the
// FSM also serialises them itself, so tests may call them directly. The read
// methods (View, Get, Scan, Proc, Procs, ...) are safe at any time,
// concurrently with applying.
type FSM struct {
	cfg Config
	log hclog.Logger

	st      atomic.Pointer[state]
	applied appliedSignal // wakes WaitApplied when st changes

	mu        sync.Mutex // serialises applying, restoring and closing
	wal       *store.WAL // nil in memory-only mode
	walGen    uint64
	walErr    error                     // sticky: the first WAL failure
	walErrPub atomic.Pointer[error]     // walErr, for lock-free readers
	walPub    atomic.Pointer[store.WAL] // wal, for lock-free readers
	nextKeyID uint64                    // next local WAL id for a new domain key
	// walNotes is the appliers' list of WAL changes, kept between
	// batches (under mu) with its room.
	walNotes  []walNote
	loadedIdx uint64 // W: the applied index the local WAL held at open
	closed    bool
	observers []*PutObserver // under mu

	nApplied    atomic.Uint64 // command entries applied (skipped and refused ones excluded)
	nWALAppends atomic.Uint64
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// NewFSM opens the FSM's data directory and loads its local WAL, which gives
// the state and the applied index W (LoadedIndex). Entries with index <= W
// are skipped when Raft replays them, so the replay is idempotent. The
// cluster layer uses W to decide whether Raft must restore a snapshot at
// start (see NeedsSnapshotRestore).
func NewFSM(cfg Config) (*FSM, error) {
	cfg = cfg.withDefaults()
	f := &FSM{cfg: cfg, log: cfg.Logger.Named("raftfsm"), nextKeyID: firstKeyID}
	f.st.Store(emptyState())
	if cfg.Dir == "" {
		return f, nil
	}
	gen, err := openDataDir(cfg.Dir, f.log)
	if err != nil {
		return nil, err
	}
	w, st, nextKey, err := f.openWAL(gen)
	if err != nil {
		return nil, err
	}
	f.wal, f.walGen, f.nextKeyID, f.loadedIdx = w, gen, nextKey, st.index
	f.walPub.Store(w)
	f.st.Store(st)
	f.log.Info("FSM loaded from local WAL", "dir", cfg.Dir, "generation", gen, "index", st.index,
		"procs", st.procs.Len(), "keys", st.kv.Len(), "max_proc_id", st.maxProcID)
	return f, nil
}

// walConfig returns the configuration of the local WAL in dir.
func (f *FSM) walConfig(dir string) store.WALConfig {
	wc := f.cfg.WAL
	wc.Dir = dir
	if wc.Sync == store.SyncDefault {
		wc.Sync = store.SyncOnRoll
	}
	if wc.Logger == nil {
		wc.Logger = f.log
	}
	return wc
}

// openWAL opens and loads the WAL of generation gen.
func (f *FSM) openWAL(gen uint64) (*store.WAL, *state, uint64, error) {
	wc := f.walConfig(walDir(f.cfg.Dir, gen))
	w, err := store.OpenWAL(wc)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("raftfsm: open local WAL: %w", err)
	}
	procs := newProcTree()
	kv := newKVTree()
	nextKey := firstKeyID
	var meta raftpb.WalMeta
	var maxLive uint64
	info, err := w.Load(func(p store.Proc) error {
		switch {
		case p.ID < walReservedBase:
			// A copy, not p.Data: the WAL may hand out slices of a whole
			// segment it read, which would then stay in memory with every
			// superseded record and key image in it (as much again as the
			// live images, or more).
			procs.ReplaceOrInsert(&procItem{id: p.ID, data: bytes.Clone(p.Data)})
			maxLive = p.ID
		case p.ID == walMetaID:
			if err := proto.Unmarshal(p.Data, &meta); err != nil {
				return fmt.Errorf("%w: meta image: %w", ErrWALDamaged, err)
			}
		default:
			var rec raftpb.KV
			if err := proto.Unmarshal(p.Data, &rec); err != nil || len(rec.Key) == 0 {
				return fmt.Errorf("%w: key image %d undecodable (err %v)", ErrWALDamaged, p.ID, err)
			}
			kv.ReplaceOrInsert(newKVItem(rec.Key, rec.Value, p.ID))
			nextKey = max(nextKey, p.ID+1)
		}
		return nil
	})
	if err == nil {
		for _, c := range info.Corruptions {
			// A torn tail loses only the newest records, whose entries Raft
			// replays; anything else may have lost records older than the
			// index the WAL reports, so the WAL is not trusted.
			if !strings.Contains(c.Reason, "torn tail") {
				err = fmt.Errorf("%w: %s", ErrWALDamaged, c)
				break
			}
		}
	}
	if err != nil {
		w.Close()
		return nil, nil, 0, fmt.Errorf("raftfsm: load local WAL %s: %w", wc.Dir, err)
	}
	st := &state{
		procs:     procs,
		kv:        kv,
		maxProcID: max(meta.MaxProcId, maxLive),
		index:     info.Index,
	}
	return w, st, nextKey, nil
}

// LoadedIndex returns W, the applied index the local WAL held when the FSM
// was opened (0 for a fresh or memory-only FSM).
func (f *FSM) LoadedIndex() uint64 { return f.loadedIdx }

// AppliedIndex returns the Raft index of the last entry applied (or of the
// restored snapshot).
func (f *FSM) AppliedIndex() uint64 { return f.st.Load().index }

// WALIndex returns the applied index written to the local WAL: what a
// restart after a process crash loads. It trails AppliedIndex by entries
// that changed nothing (no WAL record is written for them) and by
// everything after a WAL failure.
func (f *FSM) WALIndex() uint64 { return f.walIndex((*store.WAL).Index) }

// WALDurableIndex returns the applied index known synced in the local WAL:
// what a restart after a power loss loads at least. Under store.SyncOnRoll
// (the default) it trails WALIndex by up to the WAL's SyncInterval.
func (f *FSM) WALDurableIndex() uint64 { return f.walIndex((*store.WAL).DurableIndex) }

// walIndex is index of the local WAL read under f.mu, 0 without one
// (memory-only mode).
func (f *FSM) walIndex(index func(*store.WAL) uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wal == nil {
		return 0
	}
	return index(f.wal)
}

// SyncWAL makes everything written to the local WAL durable.
func (f *FSM) SyncWAL() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wal == nil || f.walErr != nil {
		return f.walErr
	}
	return f.wal.Sync()
}

// WALErr returns the local WAL's failure, if any. After a WAL failure the FSM
// keeps applying in memory (the replicated state must follow the log) but its
// local copy stops advancing; on restart Raft replays or restores the rest.
//
// It also reports a failure the WAL met on its own (a background fdatasync
// under SyncOnRoll) before any append noticed it. It never blocks on the
// apply path.
func (f *FSM) WALErr() error {
	if err := f.walErrPub.Load(); err != nil {
		return *err
	}
	if w := f.walPub.Load(); w != nil {
		if err := w.Err(); err != nil {
			return fmt.Errorf("raftfsm: local WAL %s: %w", f.cfg.Dir, err)
		}
	}
	return nil
}

// setWALErr records the first local WAL failure (f.mu held) and logs it
// once: what failed, where, and what the node does about it.
func (f *FSM) setWALErr(err error) {
	if f.walErr != nil {
		return
	}
	f.walErr = err
	f.walErrPub.Store(&err)
	f.log.Error("local WAL failed: applying continues in memory only; this node reports not ready until it is restarted (Raft replays or restores what the WAL lacks)",
		"dir", f.cfg.Dir, "error", err)
}

// WALStats returns the local WAL's counters (segments, bytes), and false
// for a memory-only FSM. It takes no lock: status pages may call it while
// the FSM applies. A snapshot restore opens a new WAL generation, whose
// counters start again from zero.
func (f *FSM) WALStats() (store.WALStats, bool) {
	w := f.walPub.Load()
	if w == nil {
		return store.WALStats{}, false
	}
	return w.Stats(), true
}

// FSMStats are counters of an FSM since it was opened.
type FSMStats struct {
	Applied    uint64 // command entries applied
	WALAppends uint64 // WAL records written by ApplyBatch
}

// Stats returns the FSM's counters.
func (f *FSM) Stats() FSMStats {
	return FSMStats{Applied: f.nApplied.Load(), WALAppends: f.nWALAppends.Load()}
}

// Close closes the local WAL. The in-memory state stays readable.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.wal != nil {
		if err := f.wal.Close(); err != nil {
			return fmt.Errorf("raftfsm: close local WAL: %w", err)
		}
	}
	return nil
}

// ---- readers ----

// View is a consistent, immutable view of the state at one applied index.
// It costs a pointer copy and stays valid (and unchanged) however long it is
// kept.
type View struct{ st *state }

// View returns the current state.
func (f *FSM) View() View { return View{f.st.Load()} }

// Index returns the Raft index the view reflects.
func (v View) Index() uint64 { return v.st.index }

// MaxProcID returns the highest procedure id ever seen, deleted ones included.
func (v View) MaxProcID() uint64 { return v.st.maxProcID }

// NumProcs returns the number of live procedures.
func (v View) NumProcs() int { return v.st.procs.Len() }

// NumKeys returns the number of domain keys.
func (v View) NumKeys() int { return v.st.kv.Len() }

// Proc returns the image of procedure id. The slice must not be modified.
func (v View) Proc(id uint64) ([]byte, bool) {
	p, ok := getProc(v.st.procs, id)
	if !ok {
		return nil, false
	}
	return p.data, true
}

// Procs calls fn for every live procedure in ascending id order until fn
// returns an error, which is returned.
func (v View) Procs(fn func(store.Proc) error) error {
	var err error
	v.st.procs.Ascend(func(p *procItem) bool {
		err = fn(store.Proc{ID: p.id, Data: p.data})
		return err == nil
	})
	return err
}

// ProcsAfter is Procs for the procedures whose id is above after.
func (v View) ProcsAfter(after uint64, fn func(store.Proc) error) error {
	if after == ^uint64(0) {
		return nil
	}
	var err error
	v.st.procs.AscendGreaterOrEqual(&procItem{id: after + 1}, func(p *procItem) bool {
		err = fn(store.Proc{ID: p.id, Data: p.data})
		return err == nil
	})
	return err
}

// ProcsBefore calls fn for every live procedure whose id is below before,
// in descending id order, until fn returns an error, which is returned.
// Listings of the newest procedures first use it.
func (v View) ProcsBefore(before uint64, fn func(store.Proc) error) error {
	if before == 0 {
		return nil
	}
	var err error
	v.st.procs.DescendLessOrEqual(&procItem{id: before - 1}, func(p *procItem) bool {
		err = fn(store.Proc{ID: p.id, Data: p.data})
		return err == nil
	})
	return err
}

// Get returns the value of a domain key. The slice must not be modified.
func (v View) Get(key string) ([]byte, bool) {
	e, ok := getKV(v.st.kv, key)
	if !ok {
		return nil, false
	}
	return e.val(), true
}

// Scan calls fn for every domain key starting with prefix, in ascending key
// order, until fn returns false.
func (v View) Scan(prefix string, fn func(key string, value []byte) bool) {
	scanKV(v.st.kv, prefix, prefix, func(e *kvItem) bool { return fn(e.key(), e.val()) })
}

// ScanBefore calls fn for every domain key starting with prefix and less
// than before (all of them if before is ""), in descending key order,
// until fn returns false: a listing newest first. It seeks to its start
// in O(log n).
func (v View) ScanBefore(prefix, before string, fn func(key string, value []byte) bool) {
	scanKVBefore(v.st.kv, prefix, before, func(e *kvItem) bool { return fn(e.key(), e.val()) })
}

// ScanFrom is Scan for the keys strictly greater than after: a paged
// listing passes the last key of the previous page. It seeks to its start
// in O(log n), however many keys come before it.
func (v View) ScanFrom(prefix, after string, fn func(key string, value []byte) bool) {
	// after+"\x00" is the smallest key greater than after.
	scanKV(v.st.kv, prefix, max(prefix, after+"\x00"), func(e *kvItem) bool { return fn(e.key(), e.val()) })
}

// Get returns the current value of a domain key.
func (f *FSM) Get(key string) ([]byte, bool) { return f.View().Get(key) }

// ScanFrom walks the current domain keys starting with prefix that are
// greater than after (see View.ScanFrom).
func (f *FSM) ScanFrom(prefix, after string, fn func(key string, value []byte) bool) {
	f.View().ScanFrom(prefix, after, fn)
}

// ScanBefore walks the current domain keys starting with prefix that are
// less than before, in descending order (see View.ScanBefore).
func (f *FSM) ScanBefore(prefix, before string, fn func(key string, value []byte) bool) {
	f.View().ScanBefore(prefix, before, fn)
}

// Scan walks the current domain keys starting with prefix (see View.Scan).
func (f *FSM) Scan(prefix string, fn func(key string, value []byte) bool) {
	f.View().Scan(prefix, fn)
}

// Proc returns the current image of procedure id.
func (f *FSM) Proc(id uint64) ([]byte, bool) { return f.View().Proc(id) }

// Procs walks the current live procedures in id order (see View.Procs).
func (f *FSM) Procs(fn func(store.Proc) error) error { return f.View().Procs(fn) }

// MaxProcID returns the highest procedure id ever seen.
func (f *FSM) MaxProcID() uint64 { return f.st.Load().maxProcID }

// ---- applying ----

// walOp is the effect of an applied write on one WAL id.
type walOp struct {
	del  bool
	data []byte // proc image, or the value of key
	key  []byte // set for key images
}

// maxKeptWALNotes bounds the room for notes kept between batches (4 MiB):
// an open's batches note a few thousand.
const maxKeptWALNotes = 1 << 16

// walNote is a walOp on id, noted in the order applied: a flush keeps the
// last of each id's.
type walNote struct {
	id uint64
	op walOp
}

// applier accumulates one ApplyBatch: the next state version and the net
// WAL changes since the last flush.
type applier struct {
	f       *FSM
	procs   *procTree // clones of the current version's trees, modified in place
	kv      *kvTree
	maxID   uint64
	metaMax uint64 // maxID as of the last WAL flush
	// ops lists the changes since the last flush, not yet netted: a
	// list sorted once per flush cost less than a map kept by id (its
	// hashing was 7% of a follower's CPU over an open).
	ops      []walNote
	opsBytes int
	puts     []observedPut // for the observers, once published
	// procProbe and kvProbe look items up for deletion: the trees keep
	// none of them, and a new one per delete escaped to the heap.
	procProbe procItem
	kvProbe   kvItem
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM. Each command entry is validated
// whole before any of it is applied: a refused entry (not ours, unknown
// mandatory type, invalid content) gets an error as its response and changes
// nothing. The batch's changes are written to the local WAL as one record
// (or a few, cut at entry boundaries, past MaxWALRecordBytes) tagged with the
// Raft index of the last entry, then the new state is published.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.st.Load()
	a := &applier{
		f:       f,
		procs:   cur.procs.Clone(),
		kv:      cur.kv.Clone(),
		maxID:   cur.maxProcID,
		metaMax: cur.maxProcID,
	}
	a.ops = f.walNotes[:0]
	index := cur.index
	changed := false
	for i, l := range logs {
		if l.Index <= index {
			// Already applied: the local WAL had it at load, or raft
			// replays an entry twice. Skipping keeps the replay idempotent.
			continue
		}
		index = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		resp, did := a.applyCommand(l)
		resps[i] = resp
		if err, ok := resp.(error); ok {
			f.log.Error("refused log entry", "index", l.Index, "term", l.Term, "error", err)
		}
		if did {
			changed = true
			f.nApplied.Add(1)
		}
		if a.opsBytes >= f.cfg.MaxWALRecordBytes {
			a.flush(l.Index)
		}
	}
	if index == cur.index {
		return resps
	}
	if changed {
		a.flush(index)
	}
	f.publish(&state{procs: a.procs, kv: a.kv, maxProcID: a.maxID, index: index})
	f.observePuts(a.puts)
	return resps
}

// applyCommand applies one command entry; it reports whether state changed.
func (a *applier) applyCommand(l *raft.Log) (any, bool) {
	env, err := decodeEnvelope(l.Data)
	if err != nil {
		return fmt.Errorf("raftfsm: entry %d: %w", l.Index, err), false
	}
	switch env.Type {
	case raftpb.CommandType_COMMAND_TYPE_NOOP:
		return nil, false
	case raftpb.CommandType_COMMAND_TYPE_PROC_BATCH:
		pb, err := decodeProcBatch(env.Payload)
		if err != nil {
			return fmt.Errorf("raftfsm: entry %d: %w", l.Index, err), false
		}
		if pb.FenceTerm != 0 && pb.FenceTerm != l.Term {
			return fmt.Errorf("raftfsm: entry %d of term %d: %w (executor of term %d)", l.Index, l.Term, ErrFenced, pb.FenceTerm), false
		}
		for _, w := range pb.Writes {
			a.applyWrite(w)
		}
		return nil, true
	}
	if env.IgnoreIfUnknown {
		a.f.log.Warn("skipping unknown optional command", "index", l.Index, "type", int32(env.Type))
		return nil, false
	}
	return fmt.Errorf("raftfsm: entry %d: %w: type %d (this node needs upgrading)", l.Index, ErrUnknownCommand, int32(env.Type)), false
}

func (a *applier) applyWrite(w *raftpb.ProcWrite) {
	for _, ps := range [2][]*raftpb.Proc{w.Inserts, w.Updates} {
		for _, p := range ps {
			a.procs.ReplaceOrInsert(&procItem{id: p.Id, data: p.Data})
			a.maxID = max(a.maxID, p.Id)
			a.note(p.Id, walOp{data: p.Data})
		}
	}
	for _, id := range w.Deletes {
		a.procProbe.id = id
		a.procs.Delete(&a.procProbe)
		a.maxID = max(a.maxID, id)
		a.note(id, walOp{del: true})
	}
	for _, m := range w.Mutations {
		switch m.Op {
		case raftpb.Mutation_OP_PUT:
			// One descent: the item is this batch's own until published,
			// so it may still take the WAL id of the item it replaced.
			e := newKVItem(m.Key, m.Value, 0)
			if old, exists := a.kv.ReplaceOrInsert(e); exists {
				e.walID = old.walID
			} else {
				e.walID = a.f.nextKeyID
				a.f.nextKeyID++
			}
			a.note(e.walID, walOp{key: m.Key, data: m.Value})
			if key := e.key(); a.f.observed(key) {
				a.puts = append(a.puts, observedPut{key, m.Value})
			}
		case raftpb.Mutation_OP_DELETE:
			a.kvProbe = kvItem{data: unsafe.SliceData(m.Key), klen: uint32(len(m.Key))}
			old, exists := a.kv.Delete(&a.kvProbe)
			a.kvProbe = kvItem{} // the entry's bytes are not the applier's to keep
			if exists {
				a.note(old.walID, walOp{del: true})
			}
		}
	}
}

// appendKVImage appends a key's WAL image, the bytes of
// proto.Marshal(&raftpb.KV{Key: key, Value: value}), to b.
func appendKVImage(b, key, value []byte) []byte {
	if len(key) > 0 {
		b = protowire.AppendTag(b, kvKeyField, protowire.BytesType)
		b = protowire.AppendBytes(b, key)
	}
	if len(value) > 0 {
		b = protowire.AppendTag(b, kvValueField, protowire.BytesType)
		b = protowire.AppendBytes(b, value)
	}
	return b
}

// kvImageSize is the length of appendKVImage's image.
func kvImageSize(key, value []byte) int {
	n := 0
	if len(key) > 0 {
		n += protowire.SizeTag(kvKeyField) + protowire.SizeBytes(len(key))
	}
	if len(value) > 0 {
		n += protowire.SizeTag(kvValueField) + protowire.SizeBytes(len(value))
	}
	return n
}

// The field numbers of raftpb.KV.
const (
	kvKeyField   protowire.Number = 1
	kvValueField protowire.Number = 2
)

func (a *applier) note(id uint64, op walOp) {
	if a.f.wal == nil {
		return
	}
	a.ops = append(a.ops, walNote{id: id, op: op})
	a.opsBytes += 16 + len(op.data) + len(op.key)
}

// flush writes the net changes since the last flush as one WAL record tagged
// with index. A WAL failure is logged and remembered, not returned: the
// entries are committed in Raft and the in-memory state must follow the log;
// only the local copy stops advancing (see WALErr).
func (a *applier) flush(index uint64) {
	f := a.f
	if f.wal == nil {
		return
	}
	var b store.Batch
	b.Index = index
	// By id: deterministic records make WAL files comparable across
	// nodes. Stable, so that the last change of an id is last of its run,
	// and the net change.
	notes := a.ops
	slices.SortStableFunc(notes, func(x, y walNote) int { return cmp.Compare(x.id, y.id) })
	net := notes[:0]
	for i, n := range notes {
		if i+1 < len(notes) && notes[i+1].id == n.id {
			continue
		}
		net = append(net, n) // never past i: the notes ahead stay unread
	}
	// The keys' images share one buffer, sized first so that it never
	// moves: two allocations per key otherwise, on every master.
	imgBytes, dels := 0, 0
	for _, n := range net {
		switch {
		case n.op.del:
			dels++
		case n.op.key != nil:
			imgBytes += kvImageSize(n.op.key, n.op.data)
		}
	}
	imgs := make([]byte, 0, imgBytes)
	// Sized once too: grown by appends, the lists of an entry of a
	// thousand records allocated about twice their size, on every master
	// for every entry.
	b.Deletes = make([]uint64, 0, dels)
	b.Updates = make([]store.Proc, 0, len(net)-dels+1) // and the meta record
	for _, n := range net {
		id, op := n.id, n.op
		switch {
		case op.del:
			b.Deletes = append(b.Deletes, id)
		case op.key != nil:
			start := len(imgs)
			imgs = appendKVImage(imgs, op.key, op.data)
			b.Updates = append(b.Updates, store.Proc{ID: id, Data: imgs[start:len(imgs):len(imgs)]})
		default:
			b.Updates = append(b.Updates, store.Proc{ID: id, Data: op.data})
		}
	}
	if a.maxID > a.metaMax {
		img, _ := proto.Marshal(&raftpb.WalMeta{MaxProcId: a.maxID})
		b.Updates = append(b.Updates, store.Proc{ID: walMetaID, Data: img})
		a.metaMax = a.maxID
	}
	clear(notes) // the ops alias the entries' data
	a.ops = notes[:0]
	f.walNotes = a.ops
	if cap(notes) > maxKeptWALNotes {
		f.walNotes = nil // a replay's huge batch: not kept for the next
	}
	a.opsBytes = 0
	if f.walErr != nil {
		return
	}
	if err := f.wal.Append(b); err != nil {
		f.setWALErr(fmt.Errorf("raftfsm: local WAL append at index %d: %w", index, err))
		return
	}
	f.nWALAppends.Add(1)
}

// NeedsSnapshotRestore tells the cluster layer how to start Raft over an FSM
// that loaded applied index w from its WAL. With raft's
// NoSnapshotRestoreOnStart, raft still takes the newest snapshot's index as
// applied and replays the log only after it; that is correct only if the FSM
// already holds at least that index. So: newest snapshot index > w means the
// snapshot must be restored (leave NoSnapshotRestoreOnStart false); otherwise
// set it, and raft replays the log from the snapshot index, the FSM skipping
// entries up to w.
func NeedsSnapshotRestore(snaps raft.SnapshotStore, w uint64) (bool, error) {
	list, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("raftfsm: list snapshots: %w", err)
	}
	if len(list) == 0 {
		return false, nil
	}
	return list[0].Index > w, nil // List returns the newest first
}

// drain reads r to its end so that a sender of a stream we refused is not
// blocked; errors are irrelevant at that point.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }
