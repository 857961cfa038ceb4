package filecare

import (
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/fsutil"
)

// The data directory is its owner's alone (fsutil.PrivateDirMode,
// PrivateFileMode): it holds the replicated state, access-control
// bindings and token hashes, the audit trail. Release 0.1.0 made its
// directories 0755 and most files 0644, so a node tightens what it finds
// at start, saying so, rather than leave an upgraded node readable.

// looseLogLines bounds the entries logged one by one: a data directory of
// 0.1.0 has a few dozen, and a line each says where they were.
const looseLogLines = 20

// TightenDataDir removes group and other permissions under dir, logging
// each entry that had them (path, mode before and after) at WARN.
func TightenDataDir(dir string, log hclog.Logger) error {
	n := 0
	err := fsutil.Tighten(dir, func(l fsutil.Loose) {
		n++
		switch {
		case l.Err != nil:
			log.Warn("data directory entry is readable by other users, and its mode could not be tightened", "path", l.Path,
				"mode", octal(l.Mode), "error", l.Err)
		case n <= looseLogLines:
			log.Warn("data directory entry was readable by other users: tightened", "path", l.Path, "mode", octal(l.Mode), "now", octal(l.Now))
		}
	})
	if n > looseLogLines {
		log.Warn("more data directory entries were readable by other users: tightened", "dir", dir, "count", n-looseLogLines)
	}
	if err != nil {
		return fmt.Errorf("check the modes of %s: %w", dir, err)
	}
	return nil
}

// octal is a mode as chmod takes it ("0644").
func octal(m fs.FileMode) string { return fmt.Sprintf("%04o", uint32(m.Perm())) }

// privateSnapshots is a raft.SnapshotStore whose snapshots are private:
// raft's FileSnapshotStore makes their directories 0755 and files 0644
// (less the umask), so each is tightened once written, before raft
// counts on it.
type privateSnapshots struct {
	raft.SnapshotStore
	// dir is where the store keeps its snapshots (<data-dir>/snapshots).
	dir string
}

// NewPrivateSnapshots opens raft's file snapshot store under base, and
// makes its directory private.
func NewPrivateSnapshots(base string, retain int, log hclog.Logger) (raft.SnapshotStore, error) {
	store, err := raft.NewFileSnapshotStoreWithLogger(base, retain, log)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "snapshots") // where FileSnapshotStore keeps them
	if err := fsutil.TightenFiles(dir); err != nil {
		return nil, fmt.Errorf("make %s private: %w", dir, err)
	}
	return &privateSnapshots{SnapshotStore: store, dir: dir}, nil
}

func (p *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := p.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &privateSink{SnapshotSink: sink, dir: p.dir}, nil
}

type privateSink struct {
	raft.SnapshotSink
	dir string
}

// Close finishes the snapshot (raft renames it into place), then makes it
// private. A snapshot that cannot be made private fails: raft keeps the
// one before it.
func (s *privateSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	if err := fsutil.TightenFiles(filepath.Join(s.dir, s.ID())); err != nil {
		return fmt.Errorf("make snapshot %s private: %w", s.ID(), err)
	}
	return nil
}
