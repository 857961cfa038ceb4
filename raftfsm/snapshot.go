package raftfsm

// Snapshots and the data directory.
//
// Stream format (what Persist writes and Restore reads): the 4 bytes
// "BTS\x01" (magic and version), then records, each a uvarint length and a
// protobuf message: one SnapshotHeader, then SnapshotRecord{proc} for every
// live procedure in id order, SnapshotRecord{kv} for every domain key in key
// order, and a final SnapshotRecord{end} repeating the header, so that a
// truncated stream is refused rather than restored. Restore reads it with
// the reader of a snapshot file's body (snapstream.go), which refuses what
// no writer writes: entries out of order, a procedure above the header's
// max id. Persist walks an immutable state version through a small
// buffered writer: memory stays bounded by the buffer and one record
// however large the state.
//
// Data directory. Dir/CURRENT names the live WAL directory, wal-<generation>
// (20 digits). Restore never touches the live WAL: it writes the whole
// snapshot into a fresh directory wal-<generation+1> as records tagged with
// the snapshot's index (RestoreBatchBytes each), syncs it (the WAL does
// not sync each record under SyncOnRoll, and every record carries the same
// index, so only the whole WAL is a consistent prefix), then atomically
// replaces CURRENT (write CURRENT.tmp, fsync, rename, fsync Dir), and only then closes
// and removes the old directory. A crash before the rename leaves CURRENT on
// the old, complete WAL and an orphan directory that the next open deletes; a
// crash after it leaves the new, complete WAL. At no point does a
// half-written WAL sit where a restart would load it.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/fsutil"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

var snapMagic = [4]byte{'B', 'T', 'S', 1}

// maxSnapRecord bounds one snapshot record, so a corrupt length cannot make
// Restore allocate without limit.
const maxSnapRecord = 256 << 20

// ErrBadSnapshot is returned by Restore for a stream that is not a complete
// Baton snapshot. The FSM is left unchanged.
var ErrBadSnapshot = errors.New("raftfsm: bad snapshot")

type fsmSnapshot struct {
	st  *state
	log hclog.Logger
}

// Snapshot implements raft.FSM. It captures the current state version: a
// pointer copy, since versions are immutable.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{st: f.st.Load(), log: f.log}, nil
}

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		s.log.Error("snapshot persist failed", "index", s.st.index, "error", err)
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

func (s *fsmSnapshot) write(w io.Writer) error { return writeStream(s.st, w) }

// WriteSnapshot writes the view as a snapshot stream (the format at the
// top of this file), as Persist does: through a small buffer, so memory
// stays bounded by it and one record however large the state.
func (v View) WriteSnapshot(w io.Writer) error { return writeStream(v.st, w) }

// writeStream writes st as a snapshot stream.
func writeStream(st *state, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.Write(snapMagic[:]); err != nil {
		return fmt.Errorf("raftfsm: write snapshot: %w", err)
	}
	hdr := &raftpb.SnapshotHeader{
		Index:     st.index,
		MaxProcId: st.maxProcID,
		Procs:     uint64(st.procs.Len()),
		Kvs:       uint64(st.kv.Len()),
	}
	var buf []byte
	put := func(m proto.Message) error {
		var err error
		buf = binary.AppendUvarint(buf[:0], uint64(proto.Size(m)))
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, m); err != nil {
			return fmt.Errorf("raftfsm: encode snapshot record: %w", err)
		}
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("raftfsm: write snapshot: %w", err)
		}
		return nil
	}
	if err := put(hdr); err != nil {
		return err
	}
	var err error
	st.procs.Ascend(func(p *procItem) bool {
		buf = appendSnapshotProc(buf[:0], p.id, p.data)
		if _, err = bw.Write(buf); err != nil {
			err = fmt.Errorf("raftfsm: write snapshot: %w", err)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	st.kv.Ascend(func(e *kvItem) bool {
		buf = appendSnapshotKV(buf[:0], e.key(), e.val())
		if _, err = bw.Write(buf); err != nil {
			err = fmt.Errorf("raftfsm: write snapshot: %w", err)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if err := put(&raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_End{End: hdr}}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("raftfsm: write snapshot: %w", err)
	}
	return nil
}

// appendSnapshotProc appends the framed SnapshotRecord{proc: {id, data}}
// (its length as a uvarint, then the record) exactly as put frames the
// proto.Marshal of that message, whose bytes it is (snapshot_append_test.go):
// a snapshot writes one per live procedure and one per key (a million
// regions and more), and the generic marshaller's size pass and oneof
// dispatch were half the CPU of a save.
func appendSnapshotProc(b []byte, id uint64, data []byte) []byte {
	inner := 0
	if id != 0 {
		inner += 1 + protowire.SizeVarint(id)
	}
	if len(data) > 0 {
		inner += 1 + protowire.SizeBytes(len(data))
	}
	b = binary.AppendUvarint(b, uint64(1+protowire.SizeBytes(inner)))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // SnapshotRecord.proc
	b = protowire.AppendVarint(b, uint64(inner))
	if id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType) // Proc.id
		b = protowire.AppendVarint(b, id)
	}
	if len(data) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType) // Proc.data
		b = protowire.AppendBytes(b, data)
	}
	return b
}

// appendSnapshotKV is appendSnapshotProc for SnapshotRecord{kv: {key,
// value}}; proto3 leaves an empty key or value out, and so does it.
func appendSnapshotKV(b []byte, key string, value []byte) []byte {
	inner := 0
	if len(key) > 0 {
		inner += 1 + protowire.SizeBytes(len(key))
	}
	if len(value) > 0 {
		inner += 1 + protowire.SizeBytes(len(value))
	}
	b = binary.AppendUvarint(b, uint64(1+protowire.SizeBytes(inner)))
	b = protowire.AppendTag(b, 2, protowire.BytesType) // SnapshotRecord.kv
	b = protowire.AppendVarint(b, uint64(inner))
	if len(key) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType) // KV.key
		b = protowire.AppendString(b, key)
	}
	if len(value) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType) // KV.value
		b = protowire.AppendBytes(b, value)
	}
	return b
}

// badSnapshot is a refusal of a raft snapshot stream (streamReader's,
// naming where) as Restore returns it: ErrBadSnapshot.
func badSnapshot(err error) error {
	var fe *SnapshotFileError
	if errors.As(err, &fe) {
		return fmt.Errorf("%w: %s at offset %d: %w", ErrBadSnapshot, fe.Field, fe.Offset, fe.Err)
	}
	return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
}

// Restore implements raft.FSM. It rebuilds the in-memory state from the
// stream and writes it into a fresh local WAL, swapped in atomically (see
// the top of snapshot.go). On any error the FSM keeps its previous state and
// WAL.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	st, newWAL, gen, nextKey, walFail, err := f.restore(rc)
	if err != nil {
		f.log.Error("snapshot restore failed; state unchanged", "error", err)
		drain(rc)
		return err
	}
	if walFail != nil {
		// The snapshot itself is good: restore it in memory, as ApplyBatch
		// applies on after a WAL failure. Failing here would make raft
		// panic ("failed to restore snapshot") on a disk that is merely
		// full. The old WAL stays what CURRENT names, with its older index,
		// so a restart restores this snapshot again.
		f.setWALErr(walFail)
	}
	if newWAL != nil {
		old, oldGen := f.wal, f.walGen
		f.wal, f.walGen, f.walErr = newWAL, gen, nil
		f.walErrPub.Store(nil)
		f.walPub.Store(newWAL)
		if old != nil {
			if err := old.Close(); err != nil {
				f.log.Warn("closing replaced WAL", "error", err)
			}
			if err := os.RemoveAll(walDir(f.cfg.Dir, oldGen)); err != nil {
				// Harmless: the next open removes directories CURRENT does not name.
				f.log.Warn("removing replaced WAL", "dir", walDir(f.cfg.Dir, oldGen), "error", err)
			}
		}
	}
	f.nextKeyID = nextKey
	f.publish(st)
	f.observeRestore()
	f.log.Info("snapshot restored", "index", st.index, "procs", st.procs.Len(), "keys", st.kv.Len(),
		"generation", f.walGen)
	return nil
}

// restore reads a snapshot stream into a new state and, with a data
// directory, into a fresh WAL. A failure to write that WAL (a full or
// failing disk) is not an error of the snapshot: restore then drops the new
// WAL, goes on in memory, and returns the failure as walFail (w is nil).
func (f *FSM) restore(rc io.Reader) (st *state, w *store.WAL, gen, nextKey uint64, walFail, err error) {
	sr, err := openStream(newOffsetReader(rc, nil), "")
	if err != nil {
		return nil, nil, 0, 0, nil, badSnapshot(err)
	}
	hdr := sr.hdr

	nextKey = firstKeyID
	var dir string
	// dropWAL abandons the new WAL after a write failure.
	dropWAL := func(cause error) {
		if walFail == nil {
			walFail = cause
		}
		if w != nil {
			w.Close()
			w = nil
		}
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	if f.cfg.Dir != "" && f.walErr == nil {
		gen = f.walGen + 1
		dir = walDir(f.cfg.Dir, gen)
		if err := os.RemoveAll(dir); err != nil {
			return nil, nil, 0, 0, nil, fmt.Errorf("raftfsm: clear %s: %w", dir, err)
		}
		var oerr error
		if w, oerr = store.OpenWAL(f.walConfig(dir)); oerr != nil {
			w = nil
			dropWAL(fmt.Errorf("raftfsm: open WAL for restore in %s: %w", dir, oerr))
		} else if _, oerr = w.Load(func(store.Proc) error { return nil }); oerr != nil {
			dropWAL(fmt.Errorf("raftfsm: load fresh WAL %s: %w", dir, oerr))
		}
		defer func() {
			if err != nil {
				dropWAL(nil)
			}
		}()
	}

	procs := newProcTree()
	kv := newKVTree()
	var batch store.Batch
	batchBytes := 0
	// flush writes the batch into the new WAL; a failure drops the WAL
	// (walFail), not the restore.
	flush := func() {
		if w == nil {
			return
		}
		batch.Index = hdr.Index
		if err := w.Append(batch); err != nil {
			dropWAL(fmt.Errorf("raftfsm: write restored WAL %s: %w", dir, err))
		}
		batch, batchBytes = store.Batch{}, 0
	}
	for {
		e, rerr := sr.next()
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = badSnapshot(rerr)
			return nil, nil, 0, 0, nil, err
		}
		var add store.Proc
		if e.Proc != nil {
			procs.ReplaceOrInsert(&procItem{id: e.Proc.ID, data: e.Proc.Data})
			add = *e.Proc
		} else {
			id := nextKey
			nextKey++
			kv.ReplaceOrInsert(newKVItem(e.Key, e.Value, id))
			img, _ := proto.Marshal(&raftpb.KV{Key: []byte(e.Key), Value: e.Value})
			add = store.Proc{ID: id, Data: img}
		}
		if w != nil {
			batch.Updates = append(batch.Updates, add)
			batchBytes += 16 + len(add.Data)
			if batchBytes >= f.cfg.RestoreBatchBytes {
				flush()
			}
		}
	}
	// The end record matched the header and the counts read.
	img, _ := proto.Marshal(&raftpb.WalMeta{MaxProcId: hdr.MaxProcId})
	// The meta record also carries the index when the snapshot is empty.
	batch.Updates = append(batch.Updates, store.Proc{ID: walMetaID, Data: img})
	flush()
	if w != nil {
		// Every record carries the snapshot's index, so a torn prefix
		// would load as the whole snapshot: the new WAL must be durable
		// before CURRENT names it (SyncOnRoll).
		if serr := w.Sync(); serr != nil {
			dropWAL(fmt.Errorf("raftfsm: sync restored WAL %s: %w", dir, serr))
		} else if cerr := writeCurrent(f.cfg.Dir, gen); cerr != nil {
			dropWAL(cerr)
		}
	}
	st = &state{procs: procs, kv: kv, maxProcID: hdr.MaxProcId, index: hdr.Index}
	return st, w, gen, nextKey, walFail, nil
}

// ---- data directory ----

const currentFile = "CURRENT"

func walDir(dir string, gen uint64) string {
	return filepath.Join(dir, fmt.Sprintf("wal-%020d", gen))
}

// openDataDir reads CURRENT (creating it, generation 1, in a new directory)
// and removes WAL directories it does not name: leftovers of restores that
// crashed before their swap, or of replaced WALs not yet removed.
func openDataDir(dir string, log hclog.Logger) (uint64, error) {
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return 0, fmt.Errorf("raftfsm: create data dir: %w", err)
	}
	var gen uint64
	b, err := os.ReadFile(filepath.Join(dir, currentFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		gen = 1
		if err := writeCurrent(dir, gen); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, fmt.Errorf("raftfsm: read %s: %w", currentFile, err)
	default:
		name := strings.TrimSpace(string(b))
		g, perr := strconv.ParseUint(strings.TrimPrefix(name, "wal-"), 10, 64)
		if !strings.HasPrefix(name, "wal-") || perr != nil || g == 0 {
			return 0, fmt.Errorf("raftfsm: %s holds %q, not a WAL directory name", filepath.Join(dir, currentFile), name)
		}
		gen = g
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("raftfsm: list data dir: %w", err)
	}
	keep := filepath.Base(walDir(dir, gen))
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "wal-") && e.Name() != keep {
			log.Info("removing WAL directory not named by CURRENT", "dir", e.Name())
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return 0, fmt.Errorf("raftfsm: remove stale %s: %w", e.Name(), err)
			}
		}
	}
	return gen, nil
}

// writeCurrent atomically points CURRENT at generation gen.
func writeCurrent(dir string, gen uint64) error {
	name := filepath.Base(walDir(dir, gen))
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, currentFile), []byte(name+"\n"), fsutil.PrivateFileMode); err != nil {
		return fmt.Errorf("raftfsm: switch %s to %s: %w", currentFile, name, err)
	}
	return nil
}
