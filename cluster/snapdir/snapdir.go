// Package snapdir keeps a directory of snapshot files named
// baton-<cluster id>-<UTC time>-<index>.snap: the leader's scheduled
// snapshots (cluster/admin) and `baton snapshot save --dir` (a CronJob's
// volume) write the same names, list them the same way and keep the newest
// few the same way, so that one directory can take either and a restore
// finds the newest by its name alone.
//
// Only names of the pattern are ever listed or removed: whatever else an
// operator keeps in the directory is left alone. Every file of the pattern
// was verified before it got its name (Create, fsutil.CreateAtomic), so the
// newest one is good to restore from.
package snapdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/fsutil"
)

// TimeLayout is the time in a name: UTC, to the second, sorting as text.
const TimeLayout = "20060102T150405Z"

// NoCluster stands for the cluster id in the names of snapshots taken
// before the cluster had one (cluster version 1).
const NoCluster = "nocluster"

// NameRE matches the names of the pattern only. The optional ".<n>" before
// ".snap" is Create's: a second snapshot of the same cluster, second and
// index (nothing written in between) gets the next free n instead of
// replacing the first.
var NameRE = regexp.MustCompile(`^baton-([0-9A-Za-z]+)-([0-9]{8}T[0-9]{6}Z)-([0-9]+)(?:\.([1-9][0-9]*))?\.snap$`)

// Name is the file name of a snapshot of cluster clusterID at Raft index
// index, taken at at.
func Name(clusterID string, at time.Time, index uint64) string {
	if clusterID == "" {
		clusterID = NoCluster
	}
	return fmt.Sprintf("baton-%s-%s-%d.snap", clusterID, at.UTC().Format(TimeLayout), index)
}

// nameSeq is Name with Create's ".<seq>" when seq > 0.
func nameSeq(clusterID string, at time.Time, index uint64, seq int) string {
	n := Name(clusterID, at, index)
	if seq == 0 {
		return n
	}
	return fmt.Sprintf("%s.%d.snap", n[:len(n)-len(".snap")], seq)
}

// File is one snapshot file of the pattern.
type File struct {
	Path      string
	ClusterID string
	At        time.Time // to the second
	Index     uint64
	// Seq is the ".<n>" of a name Create had to make unique, 0 for none.
	Seq int
}

// Parse reads a file name (no directory) of the pattern; ok is false for
// any other name.
func Parse(name string) (f File, ok bool) {
	m := NameRE.FindStringSubmatch(name)
	if m == nil {
		return File{}, false
	}
	at, err1 := time.Parse(TimeLayout, m[2])
	idx, err2 := strconv.ParseUint(m[3], 10, 64)
	seq, err3 := 0, error(nil)
	if m[4] != "" {
		seq, err3 = strconv.Atoi(m[4])
	}
	if err1 != nil || err2 != nil || err3 != nil {
		return File{}, false
	}
	return File{Path: name, ClusterID: m[1], At: at, Index: idx, Seq: seq}, true
}

// List returns the regular files of the pattern in dir, oldest first: by
// time, then index, then Create's sequence.
func List(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range entries {
		f, ok := Parse(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		f.Path = filepath.Join(dir, e.Name())
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		if a.Seq != b.Seq {
			return a.Seq < b.Seq
		}
		return a.Path < b.Path
	})
	return out, nil
}

// Prune removes the oldest files of the pattern in dir beyond the newest
// retain, never keep (the one just written, whatever the clock says of the
// others), then fsyncs dir if it removed any. It returns the paths removed;
// err joins what failed (listing dir, a removal, the fsync), and a failed
// removal does not stop the next.
func Prune(dir string, retain int, keep string) (removed []string, err error) {
	if retain < 1 {
		return nil, fmt.Errorf("snapdir: retain %d: want at least 1", retain)
	}
	files, err := List(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var errs []error
	excess := len(files) - retain
	for _, f := range files {
		if excess <= 0 {
			break
		}
		if f.Path == keep {
			continue
		}
		if err := os.Remove(f.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", f.Path, err))
			continue
		}
		excess--
		removed = append(removed, f.Path)
	}
	if len(removed) > 0 {
		if err := fsutil.SyncDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", dir, err))
		}
	}
	return removed, errors.Join(errs...)
}

// Header is what Create needs to name a file: read from the snapshot's
// own header once it is written and verified.
type Header struct {
	ClusterID string
	At        time.Time
	Index     uint64
}

// maxSeq bounds the names Create tries for one cluster, second and index.
const maxSeq = 1000

// Create writes a new snapshot into dir, whole or not at all, under the
// name its header gives, and never over a file already there. fill writes
// a temporary file in dir (and reads it back to check it) and returns the
// header it holds; the file is then fsynced, given perm, and linked under
// Name, or under the next free ".<n>" name when that one is taken (a
// second save in the same second with no write in between), and the
// directory is fsynced. A link, unlike a rename, fails rather than
// replaces, so two saves at once cannot take each other's name. On any
// error the temporary file is removed and dir holds what it held.
func Create(dir string, perm os.FileMode, fill func(f *os.File) (Header, error)) (path string, err error) {
	f, err := os.CreateTemp(dir, ".baton-snapshot.tmp-*")
	if err != nil {
		return "", fmt.Errorf("create a snapshot in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer func() {
		f.Close()
		// Linked or failed, the temporary name goes.
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err != nil {
			err = fmt.Errorf("%w (and removing %s: %v)", err, tmp, rerr)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return "", fmt.Errorf("create a snapshot in %s: %w", dir, err)
	}
	h, err := fill(f)
	if err != nil {
		return "", err
	}
	if err = f.Sync(); err != nil {
		return "", fmt.Errorf("write %s: sync: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("write %s: close: %w", tmp, err)
	}
	for seq := 0; seq < maxSeq; seq++ {
		path = filepath.Join(dir, nameSeq(h.ClusterID, h.At, h.Index, seq))
		err = os.Link(tmp, path)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			// A file system without hard links: a rename, once no file
			// has the name (two saves at once into such a directory may
			// then take the same one; a CronJob runs one at a time).
			if _, serr := os.Lstat(path); !errors.Is(serr, os.ErrNotExist) {
				return "", fmt.Errorf("write %s: %w", path, err)
			}
			if err = os.Rename(tmp, path); err != nil {
				return "", fmt.Errorf("write %s: %w", path, err)
			}
		}
		// Linked: the deferred removal drops the temporary name (a stray
		// one left would be counted by no listing).
		err = nil
		if err := fsutil.SyncDir(dir); err != nil {
			return path, fmt.Errorf("write %s: sync directory: %w", path, err)
		}
		return path, nil
	}
	return "", fmt.Errorf("write %s: %d files of that cluster, second and index are there already", Name(h.ClusterID, h.At, h.Index), maxSeq)
}
