package filecare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/bbolt"

	"github.com/baton-dev/baton/internal/fsutil"
)

// bbolt never gives pages back to the file system: after raft compacts its
// log (a snapshot, then everything but TrailingLogs entries deleted) the
// freed pages are reused for new entries, but raft.db keeps the size of
// its largest backlog for good. A bulk load that once held a million
// entries between snapshots leaves a file many times the log it now holds.
// bbolt offers no online shrink, and raft owns the open file while the node
// runs, so the file is rewritten at start-up, before raft opens it, when
// it has grown past both a floor and twice the pages in use.

// compactSuffix names the half-written copy; one left by a crash is
// removed at the next start, the original being untouched until the
// rename.
const compactSuffix = ".compact"

// Compaction is what CompactIfBloated found and did.
type Compaction struct {
	Before, After int64 // file sizes in bytes; After == Before when untouched
	InUse         int64 // bytes of pages holding data before the rewrite
	Took          time.Duration
}

// CompactIfBloated rewrites the bbolt file at path into a fresh file
// holding only its live pages when the file is at least minBytes and more
// than twice the size of those pages. The copy is written beside it, made
// durable, and renamed over the original, so a crash at any point leaves
// either the old file or the complete new one. A missing file is no work.
func CompactIfBloated(path string, minBytes int64, log hclog.Logger) (Compaction, error) {
	tmp := path + compactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Compaction{}, fmt.Errorf("removing the copy a crashed compaction left: %w", err)
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return Compaction{}, nil
	}
	if err != nil {
		return Compaction{}, err
	}
	res := Compaction{Before: st.Size(), After: st.Size()}
	if minBytes <= 0 || st.Size() < minBytes {
		return res, nil
	}
	// Read-write, though only read: a read-only bbolt does not load its
	// freelist, which is what tells the pages in use. Nothing else has the
	// file open yet.
	src, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return res, fmt.Errorf("opening %s to measure it: %w", path, err)
	}
	defer src.Close()
	inUse, err := boltPagesInUse(src)
	if err != nil {
		return res, err
	}
	res.InUse = inUse
	if 2*inUse >= st.Size() {
		return res, nil
	}
	start := time.Now()
	if err := copyBolt(src, tmp); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("compacting %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("compacting %s: %w", path, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("compacting %s: %w", path, err)
	}
	res.Took = time.Since(start)
	if nst, err := os.Stat(path); err == nil {
		res.After = nst.Size()
	}
	log.Info("compacted the raft log file: bbolt keeps the size of its largest backlog otherwise",
		"path", path, "before_bytes", res.Before, "after_bytes", res.After, "in_use_bytes", res.InUse, "took", res.Took)
	return res, nil
}

// boltPagesInUse is the file's size less its free pages (those on the
// freelist and those pending release by a reader that has since gone).
func boltPagesInUse(db *bbolt.DB) (int64, error) {
	var size int64
	if err := db.View(func(tx *bbolt.Tx) error {
		size = tx.Size()
		return nil
	}); err != nil {
		return 0, err
	}
	s := db.Stats()
	free := int64(s.FreePageN+s.PendingPageN) * int64(db.Info().PageSize)
	return max(size-free, 0), nil
}

// copyTxBytes bounds one write transaction of the copy, so that a big log
// is not held in memory whole.
const copyTxBytes = 32 << 20

// copyBolt writes every bucket of src, nested ones included, into a new
// file at dst, and syncs it. raft-boltdb keeps two flat buckets; the copy
// does not depend on that.
func copyBolt(src *bbolt.DB, dst string) error {
	out, err := bbolt.Open(dst, 0o600, &bbolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		return err
	}
	w := &boltCopier{db: out}
	err = src.View(func(stx *bbolt.Tx) error {
		return stx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return w.bucket([][]byte{name}, b)
		})
	})
	if err == nil {
		err = w.commit()
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// boltCopier writes into dst in transactions of about copyTxBytes.
type boltCopier struct {
	db      *bbolt.DB
	tx      *bbolt.Tx
	pending int
}

func (w *boltCopier) commit() error {
	if w.tx == nil {
		return nil
	}
	err := w.tx.Commit()
	w.tx, w.pending = nil, 0
	return err
}

// target returns the bucket at path in the current transaction, creating
// it (and its parents) if missing.
func (w *boltCopier) target(path [][]byte) (*bbolt.Bucket, error) {
	if w.tx == nil {
		tx, err := w.db.Begin(true)
		if err != nil {
			return nil, err
		}
		w.tx = tx
	}
	b, err := w.tx.CreateBucketIfNotExists(path[0])
	for _, name := range path[1:] {
		if err != nil {
			return nil, err
		}
		b, err = b.CreateBucketIfNotExists(name)
	}
	return b, err
}

func (w *boltCopier) bucket(path [][]byte, src *bbolt.Bucket) error {
	// Created even when empty, as the original had it.
	if _, err := w.target(path); err != nil {
		return err
	}
	var dst *bbolt.Bucket // of the current transaction; nil after a commit
	return src.ForEach(func(k, v []byte) error {
		if v == nil { // a nested bucket: it may commit the transaction
			dst = nil
			return w.bucket(append(path[:len(path):len(path)], k), src.Bucket(k))
		}
		if w.pending >= copyTxBytes {
			if err := w.commit(); err != nil {
				return err
			}
			dst = nil
		}
		if dst == nil {
			var err error
			if dst, err = w.target(path); err != nil {
				return err
			}
			// Keys arrive sorted, so fill the pages full rather than half.
			dst.FillPercent = 1.0
		}
		w.pending += len(k) + len(v)
		return dst.Put(k, v)
	})
}
