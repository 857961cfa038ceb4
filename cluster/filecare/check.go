package filecare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/baton-dev/baton/internal/fsutil"
)

// Checks of the node's files at start (see cluster's package documentation,
// Damaged files at start).

// ErrDamaged is wrapped by the checks' errors when a file of the node's
// data directory is damaged in a way it cannot recover from by itself.
var ErrDamaged = errors.New("damaged file")

// CheckRaftLog reads the whole raft log at path, if there is one, before
// raft-boltdb uses it. bbolt keeps checksums on its meta pages only, and
// answers other damage (a page of an unknown type, an element count that
// runs off the page, a freelist that is not one) with a panic or a memory
// fault on first use; Tx.Check cannot be used instead, since it walks the
// pages in a goroutine of its own, where such a panic cannot be caught, and
// loops for as long as a damaged count says. So the check walks every key
// in this goroutine, with faults turned into panics and panics into the
// error, bounded by the number of keys the file could hold, and checks what
// raft-boltdb stores: log keys are consecutive 8-byte indexes whose entries
// decode and carry their own index; the term and vote values are 8 bytes.
// The error names the file and, where bbolt or the check can tell, the page
// or the log index.
//
// Some damage makes bbolt itself loop for ever (a branch page that leads
// back to itself: seen after a device lost pages bbolt had synced);
// walkBoltPages, reading the file directly, finds that first. As a last
// resort the walk runs in a goroutine of its own and is given up after
// checkBoltTime (plus one second per 50 MB): the start is refused, and the
// goroutine, with the file's handle, is abandoned to the exiting process.
func CheckRaftLog(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raft log %s: %w", path, err)
	}
	limit := checkBoltTime + time.Duration(st.Size()/(50<<20))*time.Second
	done := make(chan error, 1)
	go func() { done <- walkBolt(path, st) }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("raft log %s: %w: reading it did not finish in %v (a cycle in its pages?); refusing to start: remove this node's data directory and add it back to the cluster", path, ErrDamaged, limit)
	}
}

// checkBoltTime is the base time the start-up walk of raft.db may take.
const checkBoltTime = 10 * time.Second

func walkBolt(path string, st os.FileInfo) (err error) {
	if err := walkBoltPages(path); err != nil {
		return fmt.Errorf("raft log %s: %w: %w (refusing to start: its terms, votes and entries cannot be trusted; remove this node's data directory and add it back to the cluster)", path, ErrDamaged, err)
	}
	const advice = "refusing to start: its terms, votes and entries cannot be trusted; remove this node's data directory and add it back to the cluster"
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// where the walk was, for the error of a panic
	where := "opening it"
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raft log %s: %w: bbolt failed %s: %v (%s)", path, ErrDamaged, where, r, advice)
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return fmt.Errorf("raft log %s: locked by another process: %w", path, err)
		}
		return fmt.Errorf("raft log %s: %w: open: %w (%s)", path, ErrDamaged, err, advice)
	}
	defer db.Close()
	maxKeys := st.Size()/16 + 16 // a leaf element alone takes 16 bytes
	err = db.View(func(tx *bbolt.Tx) error {
		logs, conf := tx.Bucket([]byte("logs")), tx.Bucket([]byte("conf"))
		if logs == nil || conf == nil {
			return errors.New("bucket logs or conf missing")
		}
		var prev uint64
		var n int64
		where = fmt.Sprintf("reading the first log entry (logs bucket root page %d)", logs.Root())
		c := logs.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			where = fmt.Sprintf("reading the log after index %d (logs bucket root page %d)", prev, logs.Root())
			if n++; n > maxKeys {
				return fmt.Errorf("log bucket yields more than the %d keys the file can hold (a cycle in its pages)", maxKeys)
			}
			if len(k) != 8 {
				return fmt.Errorf("log key %x after index %d is not an index (logs bucket root page %d)", k, prev, logs.Root())
			}
			idx := binary.BigEndian.Uint64(k)
			if prev != 0 && idx != prev+1 {
				return fmt.Errorf("log index %d follows %d", idx, prev)
			}
			var l raft.Log
			if err := codec.NewDecoderBytes(v, &codec.MsgpackHandle{}).Decode(&l); err != nil {
				return fmt.Errorf("log entry %d: %w", idx, err)
			}
			if l.Index != idx {
				return fmt.Errorf("log entry under key %d holds index %d", idx, l.Index)
			}
			prev = idx
		}
		n = 0
		where = fmt.Sprintf("reading the term and vote (conf bucket root page %d)", conf.Root())
		c = conf.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n > maxKeys {
				return fmt.Errorf("conf bucket yields more than the %d keys the file can hold (a cycle in its pages)", maxKeys)
			}
			switch string(k) {
			case "CurrentTerm", "LastVoteTerm":
				if len(v) != 8 {
					return fmt.Errorf("%s is %d bytes, want 8", k, len(v))
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raft log %s: %w: page size %d: %w (%s)", path, ErrDamaged, db.Info().PageSize, err, advice)
	}
	return nil
}

// CheckSnapshots verifies raft's file snapshots before raft starts: a
// snapshot whose metadata cannot be read, or whose data does not match its
// CRC, is damaged. Raft at start takes the newest listed snapshot as its
// base (restoring it, unless NoSnapshotRestoreOnStart) and reads its log
// from the entry after it: that entry must still be in the log, or raft
// panics. The rule:
//
//   - if the newest intact snapshot is such a base, every damaged one is
//     moved aside to <data>/snapshots.damaged (otherwise raft would skip
//     or restore it, or offer it to a lagging follower);
//   - else, if the damaged one is the newest and the local WAL reaches its
//     index (so raft need not read it), it is left in place, and the
//     caller takes a new snapshot as soon as raft runs (takeSnapshot), so
//     it is never restored or sent;
//   - else the entries between the intact state and the log are lost and
//     the start is refused with an error naming the damaged snapshots.
//
// dataDir holds raft's file snapshot store snaps (in dataDir/snapshots),
// logs is raft's log store and walIndex the index the node's local WAL
// reaches (raftfsm.FSM.LoadedIndex).
func CheckSnapshots(dataDir string, snaps raft.SnapshotStore, logs raft.LogStore, walIndex uint64, log hclog.Logger) (takeSnapshot bool, err error) {
	dir := filepath.Join(dataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	list, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	listed := map[string]bool{}
	for _, m := range list {
		listed[m.ID] = true
	}
	damaged := map[string]string{} // id → why
	var names []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") || listed[e.Name()] {
			continue
		}
		// raft lists only snapshots whose meta.json it can read.
		damaged[e.Name()] = "meta.json unreadable"
	}
	var newest uint64
	newestDamaged := false
	for i, m := range list {
		_, rc, err := snaps.Open(m.ID) // reads all of state.bin against its CRC
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			damaged[m.ID] = fmt.Sprintf("state.bin: %v", err)
			newestDamaged = newestDamaged || i == 0
			continue
		}
		newest = max(newest, m.Index)
	}
	if len(damaged) == 0 {
		return false, nil
	}
	for id, why := range damaged {
		names = append(names, fmt.Sprintf("%s (%s)", filepath.Join(dir, id), why))
	}
	first, ferr := logs.FirstIndex()
	last, lerr := logs.LastIndex()
	if err := errors.Join(ferr, lerr); err != nil {
		return false, fmt.Errorf("read raft log bounds: %w", err)
	}
	w := walIndex
	keepNewest := false
	switch {
	case last == 0 || first <= newest+1:
		// The newest intact snapshot (or none: the whole log) is a base.
	case newestDamaged && w >= list[0].Index && first <= list[0].Index+1:
		keepNewest = true
	default:
		return false, fmt.Errorf("%w: %s: without it the raft log, which starts at index %d, is not reached by this node's intact state (newest intact snapshot %d, local WAL %d): the entries between are lost; refusing to start (put a good snapshot back, or remove this node's data directory and add it back to the cluster)",
			ErrDamaged, strings.Join(names, ", "), first, newest, w)
	}
	for id, why := range damaged {
		if keepNewest && id == list[0].ID {
			log.Warn("newest snapshot damaged; the local WAL covers it, so it is left in place and replaced by a new snapshot",
				"snapshot", filepath.Join(dir, id), "reason", why, "snapshot_index", list[0].Index, "fsm_wal_index", w)
			continue
		}
		dst := filepath.Join(dataDir, "snapshots.damaged")
		if err := fsutil.MkdirPrivate(dst); err != nil {
			return false, fmt.Errorf("set aside damaged snapshot %s: %w", id, err)
		}
		to := filepath.Join(dst, fmt.Sprintf("%s.%d", id, time.Now().UnixNano()))
		if err := os.Rename(filepath.Join(dir, id), to); err != nil {
			return false, fmt.Errorf("set aside damaged snapshot %s: %w", id, err)
		}
		log.Warn("damaged snapshot set aside", "snapshot", filepath.Join(dir, id), "moved_to", to, "reason", why)
	}
	return keepNewest, nil
}
