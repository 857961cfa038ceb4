package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// Checks of the node's files at start (see the package documentation,
// Damaged files).

// ErrDamaged is wrapped by NewNode's error when a file of the node's data
// directory is damaged in a way it cannot recover from by itself.
var ErrDamaged = errors.New("damaged file")

// checkBolt opens the raft log at path, if there is one, and checks every
// page of it (bbolt's Tx.Check) before raft-boltdb uses it: bbolt answers
// some kinds of damage, such as two invalid meta pages or a page of an
// unknown type, with a panic or a fault on first use, not with an error.
// Both are turned into an error naming the file and the page.
func checkBolt(path string) (err error) {
	if _, serr := os.Stat(path); errors.Is(serr, os.ErrNotExist) {
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raft log %s: %w: bbolt failed reading it: %v (refusing to start: its terms, votes and entries cannot be trusted; remove this node's data directory and add it back to the cluster)", path, ErrDamaged, r)
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("raft log %s: %w: open: %w (refusing to start: remove this node's data directory and add it back to the cluster)", path, ErrDamaged, err)
	}
	defer db.Close()
	var problems []string
	err = db.View(func(tx *bbolt.Tx) error {
		for e := range tx.Check() {
			problems = append(problems, e.Error())
		}
		return nil
	})
	if err == nil && len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
		}
		err = fmt.Errorf("raft log %s: %w: page size %d: %s (refusing to start: remove this node's data directory and add it back to the cluster)",
			path, ErrDamaged, db.Info().PageSize, strings.Join(problems, "; "))
	}
	return err
}

// checkSnapshots verifies raft's file snapshots before raft starts. A
// snapshot whose metadata cannot be read or whose data does not match its
// CRC is moved aside to <data>/snapshots.damaged (raft would otherwise
// skip it silently, offer it to lagging followers, or restore an older one
// at start). The node then starts from what is left, provided that still
// reaches the raft log: the local WAL's index or the newest intact
// snapshot must be at least the log's first index - 1. Otherwise entries
// between them are gone (raft would panic on the missing entry) and the
// start is refused with an error naming the damaged snapshot.
func (n *Node) checkSnapshots(logs raft.LogStore) error {
	if n.cfg.SnapshotStore != nil {
		return nil
	}
	dir := filepath.Join(n.cfg.DataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	list, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	listed := map[string]bool{}
	for _, m := range list {
		listed[m.ID] = true
	}
	var damaged []string
	setAside := func(id, why string) error {
		dst := filepath.Join(n.cfg.DataDir, "snapshots.damaged")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("set aside damaged snapshot %s: %w", id, err)
		}
		to := filepath.Join(dst, fmt.Sprintf("%s.%d", id, time.Now().UnixNano()))
		if err := os.Rename(filepath.Join(dir, id), to); err != nil {
			return fmt.Errorf("set aside damaged snapshot %s: %w", id, err)
		}
		n.log.Warn("damaged snapshot set aside", "snapshot", filepath.Join(dir, id), "moved_to", to, "reason", why)
		damaged = append(damaged, fmt.Sprintf("%s (%s)", filepath.Join(dir, id), why))
		return nil
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") || listed[e.Name()] {
			continue
		}
		// raft lists only snapshots whose meta.json it can read.
		if err := setAside(e.Name(), "meta.json unreadable"); err != nil {
			return err
		}
	}
	var newest uint64
	for _, m := range list {
		_, rc, err := n.snaps.Open(m.ID) // reads all of state.bin against its CRC
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			if serr := setAside(m.ID, fmt.Sprintf("state.bin: %v", err)); serr != nil {
				return serr
			}
			continue
		}
		newest = max(newest, m.Index)
	}
	first, ferr := logs.FirstIndex()
	last, lerr := logs.LastIndex()
	if err := errors.Join(ferr, lerr); err != nil {
		return fmt.Errorf("read raft log bounds: %w", err)
	}
	base := max(newest, n.fsm.LoadedIndex())
	if last > 0 && first > base+1 {
		what := "no snapshot"
		if len(damaged) > 0 {
			what = "damaged snapshots " + strings.Join(damaged, ", ")
		}
		return fmt.Errorf("%w: the raft log starts at index %d, but this node's intact state reaches only index %d (local WAL %d, newest intact snapshot %d; %s): the entries between are lost; refusing to start (put a good snapshot back, or remove this node's data directory and add it back to the cluster)",
			ErrDamaged, first, base, n.fsm.LoadedIndex(), newest, what)
	}
	return nil
}
