package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/baton-dev/baton/cluster/filecare"
	"github.com/baton-dev/baton/internal/fsutil"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// Restore from a snapshot file (etcd's model): RestoreDataDir builds one
// new member's data directory from a file 'baton snapshot save' wrote. It
// is run once per member of the new cluster, each time with the same file
// and the same membership, and the members are then started as usual:
// they find raft state and do not bootstrap.
//
// What it writes is what raft itself would hold after installing the
// snapshot: a raft snapshot at the file's index and term whose
// configuration is the new membership, all voters, and whose state is the
// file's body; an empty log; the current term set to the snapshot's term.
// The term matters: raft compares the last log terms in elections, so the
// first leader's entries must carry a term above the snapshot's, or a
// member holding only the snapshot would look more up to date than one
// holding committed entries after it. The local WAL is left empty: raft
// restores the snapshot into the FSM at the first start (raftfsm doc,
// Restart), which writes it.
//
// The state is changed in two ways, the same on every member (each
// member's copy must be identical):
//   - ClusterIDKey is dropped: the new cluster is not the old one, and its
//     first leader writes a new random id as for any cluster
//     (admin.ensureClusterID). The old id stays in the file's header.
//   - every key under "nodes/" is dropped: the old members' addresses,
//     reports of their binaries, proofs and removal marks. They describe
//     machines that are not this cluster's, and a removal mark of an old
//     member whose id a new member reuses would make the new one think it
//     was removed. Each new member registers its own once it runs.
//
// Nothing is ever partly written: the directory is built beside the
// target (<dir>.tmp-*) and renamed into place once complete and synced; a
// failure removes it, a crash leaves only that temporary directory.

// ErrDataDirNotEmpty is returned by RestoreDataDir for a data directory
// that holds anything: a restore never writes over a member's state.
var ErrDataDirNotEmpty = errors.New("cluster: data directory not empty")

// RestoreConfig says what RestoreDataDir builds.
type RestoreConfig struct {
	// File is the snapshot file.
	File string
	// DataDir is the new member's data directory: absent or empty.
	DataDir string
	// ID is the new member's id, one of Peers.
	ID string
	// Peers is the new cluster's membership, every member a voter: the
	// same on every member restored.
	Peers []Peer
	// Logger, default none.
	Logger hclog.Logger
}

// RestoreResult is what RestoreDataDir built.
type RestoreResult struct {
	DataDir string
	ID      string
	Peers   []Peer
	// Index and Term are the raft snapshot's, the file's index and term.
	Index, Term uint64
	// Procs and Keys are the state restored; DroppedKeys the keys left
	// out (ClusterIDKey and the old members' records).
	Procs, Keys, DroppedKeys uint64
	// RestoredFrom is the old cluster's id, as the file's header says.
	RestoredFrom string
	// SnapshotID names the raft snapshot, in DataDir/snapshots.
	SnapshotID string
}

// restoreDrops says whether a key of the snapshot is left out of a restore.
func restoreDrops(key string) bool {
	// RestoredKey too: a snapshot of a restored cluster saved before its
	// hold ended carries the old mark, which this restore writes anew.
	return key == ClusterIDKey || key == RestoredKey || strings.HasPrefix(key, "nodes/")
}

// restoreScan is what the first read of the file found.
type restoreScan struct {
	header      raftfsm.SnapshotFileHeader
	keys, drops uint64
}

// RestoreDataDir builds cfg.DataDir from cfg.File (see above). The file is
// read through and verified before anything is created; a refused file
// wraps raftfsm.ErrBadSnapshotFile, a directory that holds anything
// ErrDataDirNotEmpty.
func RestoreDataDir(cfg RestoreConfig) (RestoreResult, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := checkRestoreMembers(cfg.ID, cfg.Peers); err != nil {
		return RestoreResult{}, err
	}
	if cfg.DataDir == "" {
		return RestoreResult{}, errors.New("cluster: restore: no data directory given")
	}
	if err := checkEmptyDataDir(cfg.DataDir); err != nil {
		return RestoreResult{}, err
	}
	scan, err := scanSnapshotFile(cfg.File)
	if err != nil {
		return RestoreResult{}, err
	}
	h := scan.header
	if h.Index == 0 {
		return RestoreResult{}, fmt.Errorf("cluster: restore: %s: %w: the state is at raft index 0: it holds nothing to restore", cfg.File, raftfsm.ErrBadSnapshotFile)
	}
	res := RestoreResult{DataDir: cfg.DataDir, ID: cfg.ID, Peers: cfg.Peers, Index: h.Index, Term: max(h.Term, 1),
		Procs: h.Procs, Keys: scan.keys - scan.drops, DroppedKeys: scan.drops, RestoredFrom: h.ClusterID}

	parent, base := filepath.Dir(filepath.Clean(cfg.DataDir)), filepath.Base(filepath.Clean(cfg.DataDir))
	if err := os.MkdirAll(parent, fsutil.PrivateDirMode); err != nil {
		return RestoreResult{}, fmt.Errorf("cluster: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, base+".tmp-")
	if err != nil {
		return RestoreResult{}, fmt.Errorf("cluster: restore: %w", err)
	}
	done := false
	defer func() {
		if !done {
			if rerr := os.RemoveAll(tmp); rerr != nil {
				log.Warn("restore: removing the temporary directory", "dir", tmp, "error", rerr)
			}
		}
	}()
	if res.SnapshotID, err = buildRestoredDir(tmp, cfg, scan, res.Term, log); err != nil {
		return RestoreResult{}, err
	}
	// An empty directory given as the target goes first (Go's rename does
	// not replace a directory); rmdir refuses one that gained entries
	// meanwhile, which is then left as it is.
	if err := os.Remove(cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		if err2 := checkEmptyDataDir(cfg.DataDir); err2 != nil {
			return RestoreResult{}, err2
		}
		return RestoreResult{}, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := os.Rename(tmp, cfg.DataDir); err != nil {
		return RestoreResult{}, fmt.Errorf("cluster: restore: move %s into place: %w", tmp, err)
	}
	done = true
	if err := fsutil.SyncDir(parent); err != nil {
		return RestoreResult{}, fmt.Errorf("cluster: restore: sync %s: %w", parent, err)
	}
	log.Info("data directory restored from snapshot", "dir", cfg.DataDir, "id", cfg.ID, "peers", FormatPeers(cfg.Peers),
		"index", res.Index, "term", res.Term, "procs", res.Procs, "keys", res.Keys, "restored_from", res.RestoredFrom)
	return res, nil
}

func checkRestoreMembers(id string, peers []Peer) error {
	if id == "" {
		return errors.New("cluster: restore: no member id given")
	}
	if len(peers) == 0 {
		return errors.New("cluster: restore: no members given")
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, p := range peers {
		if p.ID == "" || p.Address == "" {
			return fmt.Errorf("cluster: restore: member %q at %q: want an id and an address", p.ID, p.Address)
		}
		if ids[p.ID] || addrs[p.Address] {
			return fmt.Errorf("cluster: restore: member %s: its id or address is listed twice", p)
		}
		ids[p.ID], addrs[p.Address] = true, true
	}
	if !ids[id] {
		return fmt.Errorf("cluster: restore: the members (%s) do not list %q: give the same list to every member, this one included", FormatPeers(peers), id)
	}
	return nil
}

// checkEmptyDataDir refuses a data directory that holds anything, naming
// what it holds. An absent one is fine.
func checkEmptyDataDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is a file, not a directory", ErrDataDirNotEmpty, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	var names []string
	for _, e := range entries[:min(len(entries), 5)] {
		names = append(names, e.Name())
	}
	if len(entries) > 5 {
		names = append(names, fmt.Sprintf("and %d more", len(entries)-5))
	}
	return fmt.Errorf("%w: %s holds %s: a restore never writes over a member's state; give an empty or new directory",
		ErrDataDirNotEmpty, dir, strings.Join(names, ", "))
}

// scanSnapshotFile reads the file through, verifying its structure and
// checksum, and counts what a restore keeps of it.
func scanSnapshotFile(path string) (restoreScan, error) {
	var s restoreScan
	err := readSnapshotFile(path, func(h raftfsm.SnapshotFileHeader) error {
		s.header = h
		return nil
	}, func(e raftfsm.SnapshotEntry) error {
		if e.Proc != nil {
			return nil
		}
		s.keys++
		if restoreDrops(e.Key) {
			s.drops++
		}
		if e.Key == ClusterFormatKey {
			f, err := version.DecodeClusterFormat(e.Value)
			if err != nil {
				return fmt.Errorf("cluster: restore: %s: the cluster version's record: %w", path, err)
			}
			if err := version.CheckReadable(f, version.Newest()); err != nil {
				return fmt.Errorf("cluster: restore: %s: %w", path, err)
			}
		}
		return nil
	})
	return s, err
}

// readSnapshotFile reads the snapshot file at path through, handing on its
// header and entries; an error of the file is a *raftfsm.SnapshotFileError.
func readSnapshotFile(path string, header func(raftfsm.SnapshotFileHeader) error, entry func(raftfsm.SnapshotEntry) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	defer f.Close()
	sr, err := raftfsm.OpenSnapshotFile(f)
	if err != nil {
		return fmt.Errorf("cluster: restore: %s: %w", path, err)
	}
	if err := header(sr.Header()); err != nil {
		return err
	}
	for {
		e, err := sr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: restore: %s: %w", path, err)
		}
		if err := entry(e); err != nil {
			return err
		}
	}
}

// buildRestoredDir writes the member's state into dir (empty): the raft
// snapshot, the term, the node id. It returns the snapshot's id.
func buildRestoredDir(dir string, cfg RestoreConfig, scan restoreScan, term uint64, log hclog.Logger) (string, error) {
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return "", fmt.Errorf("cluster: restore: %w", err)
	}
	for _, d := range []string{"raft", "fsm"} {
		if err := fsutil.MkdirPrivate(filepath.Join(dir, d)); err != nil {
			return "", fmt.Errorf("cluster: restore: %w", err)
		}
	}
	h := scan.header
	var conf raft.Configuration
	for _, p := range cfg.Peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: raft.Voter})
	}
	snaps, err := filecare.NewPrivateSnapshots(dir, DefaultConfig().SnapshotRetain, log.Named("snapshots"))
	if err != nil {
		return "", fmt.Errorf("cluster: restore: open snapshot store: %w", err)
	}
	// The transport only encodes the voters' addresses for raft's legacy
	// peers field of the snapshot's meta, as the node's TCP transport
	// does (the address as it is).
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	// The configuration counts as committed at the snapshot's index, as in
	// any snapshot raft takes itself.
	sink, err := snaps.Create(raft.SnapshotVersionMax, h.Index, term, conf, h.Index, trans)
	if err != nil {
		return "", fmt.Errorf("cluster: restore: create the raft snapshot: %w", err)
	}
	if err := copyRestoredState(cfg.File, sink, scan); err != nil {
		_ = sink.Cancel()
		return "", err
	}
	if err := sink.Close(); err != nil {
		return "", fmt.Errorf("cluster: restore: write the raft snapshot: %w", err)
	}

	// raft's key for the current term (keyCurrentTerm in raft.go; raft
	// exports no name for it). TestRestoreDataDir checks a started node's
	// term rises above the snapshot's.
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft", "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return "", fmt.Errorf("cluster: restore: create the raft log: %w", err)
	}
	err = bolt.SetUint64([]byte("CurrentTerm"), term)
	if cerr := bolt.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("cluster: restore: write the raft term: %w", err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, nodeIDFile), []byte(cfg.ID+"\n"), fsutil.PrivateFileMode); err != nil {
		return "", fmt.Errorf("cluster: restore: record node id: %w", err)
	}
	for _, d := range []string{filepath.Join(dir, "raft"), filepath.Join(dir, "fsm"), filepath.Join(dir, "snapshots"), dir} {
		if err := fsutil.SyncDir(d); err != nil {
			return "", fmt.Errorf("cluster: restore: sync %s: %w", d, err)
		}
	}
	return sink.ID(), nil
}

// copyRestoredState reads the file again into a raft snapshot's state,
// leaving out what a restore drops. The file is verified again as it is
// read: one changed since the scan is refused before the snapshot is kept.
func copyRestoredState(path string, w io.Writer, scan restoreScan) error {
	h := scan.header
	var sw *raftfsm.StreamWriter
	// The mark goes in key order, before the first key after it.
	mark, err := json.Marshal(RestoredMark{From: h.ClusterID, Index: h.Index})
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	marked := false
	err = readSnapshotFile(path, func(got raftfsm.SnapshotFileHeader) error {
		if got != h {
			return fmt.Errorf("cluster: restore: %s changed while being restored (header %+v, then %+v)", path, h, got)
		}
		var err error
		sw, err = raftfsm.NewStreamWriter(w, h.Index, h.MaxProcID, h.Procs, scan.keys-scan.drops+1)
		if err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
		return nil
	}, func(e raftfsm.SnapshotEntry) error {
		var err error
		switch {
		case e.Proc != nil:
			err = sw.Proc(e.Proc.ID, e.Proc.Data)
		case restoreDrops(e.Key):
		default:
			if !marked && e.Key > RestoredKey {
				marked, err = true, sw.Key(RestoredKey, mark)
			}
			if err == nil {
				err = sw.Key(e.Key, e.Value)
			}
		}
		if err != nil {
			return fmt.Errorf("cluster: restore: %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !marked {
		if err := sw.Key(RestoredKey, mark); err != nil {
			return fmt.Errorf("cluster: restore: %s: %w", path, err)
		}
	}
	if err := sw.Close(); err != nil {
		return fmt.Errorf("cluster: restore: %s: %w", path, err)
	}
	return nil
}
