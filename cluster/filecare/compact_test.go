package filecare

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// fillRaftLog writes n entries of size bytes each into a raft-boltdb
// store at path, then deletes all but the last keep, as raft does after
// a snapshot: the file keeps the size of the whole backlog.
func fillRaftLog(t *testing.T, path string, n, size, keep int) {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const batch = 256
	for first := 1; first <= n; first += batch {
		var logs []*raft.Log
		for i := first; i < first+batch && i <= n; i++ {
			logs = append(logs, &raft.Log{Index: uint64(i), Term: 3, Type: raft.LogCommand, Data: entryData(i, size)})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRange(1, uint64(n-keep)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
}

func entryData(i, size int) []byte {
	return bytes.Repeat([]byte{byte(i)}, size)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestCompactBoltShrinksBloatedLog(t *testing.T) {
	const n, size, keep = 3000, 8 << 10, 100
	path := filepath.Join(t.TempDir(), "raft.db")
	fillRaftLog(t, path, n, size, keep)
	before := fileSize(t, path)
	// A crash of an earlier compaction left its copy behind.
	if err := os.WriteFile(path+compactSuffix, []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}

	res, err := CompactIfBloated(path, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	after := fileSize(t, path)
	t.Logf("raft.db %d → %d bytes (%d in use before)", before, after, res.InUse)
	if res.Before != before || res.After != after {
		t.Fatalf("reported %d → %d, files are %d → %d", res.Before, res.After, before, after)
	}
	if after*4 > before {
		t.Fatalf("raft.db %d → %d bytes: want it cut to the %d live entries", before, after, keep)
	}
	if _, err := os.Stat(path + compactSuffix); !os.IsNotExist(err) {
		t.Fatalf("the copy is still there: %v", err)
	}

	// Raft finds its log and stable store as it left them.
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != n-keep+1 || last != n {
		t.Fatalf("log holds [%d, %d], want [%d, %d]", first, last, n-keep+1, n)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Term != 3 || !bytes.Equal(l.Data, entryData(int(i), size)) {
			t.Fatalf("entry %d changed: term %d, %d bytes", i, l.Term, len(l.Data))
		}
	}
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("CurrentTerm %d, %v", term, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("LastVoteCand %q, %v", v, err)
	}
	// New entries go on from where the log was.
	if err := s.StoreLog(&raft.Log{Index: n + 1, Term: 4, Data: []byte("next")}); err != nil {
		t.Fatal(err)
	}
}

func TestCompactBoltLeavesOtherFilesAlone(t *testing.T) {
	dir := t.TempDir()

	// Small: under the floor, not even opened.
	small := filepath.Join(dir, "small.db")
	fillRaftLog(t, small, 300, 8<<10, 10)
	st0, _ := os.Stat(small)
	res, err := CompactIfBloated(small, 64<<20, hclog.NewNullLogger())
	if err != nil || res.After != st0.Size() || res.InUse != 0 {
		t.Fatalf("under the floor: %+v, %v", res, err)
	}

	// Mostly live: over the floor but not twice its pages in use.
	live := filepath.Join(dir, "live.db")
	fillRaftLog(t, live, 300, 8<<10, 290)
	st1, _ := os.Stat(live)
	res, err = CompactIfBloated(live, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(live)
	if res.After != st1.Size() || !os.SameFile(st1, st2) || res.InUse*2 < st1.Size() {
		t.Fatalf("a mostly live file was rewritten or misjudged: %+v (size %d)", res, st1.Size())
	}

	// Disabled, and missing.
	if res, err := CompactIfBloated(small, -1, hclog.NewNullLogger()); err != nil || res.After != st0.Size() {
		t.Fatalf("disabled: %+v, %v", res, err)
	}
	if res, err := CompactIfBloated(filepath.Join(dir, "none.db"), 1, hclog.NewNullLogger()); err != nil || res.Before != 0 {
		t.Fatalf("missing file: %+v, %v", res, err)
	}
}
