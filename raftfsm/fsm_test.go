package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

func newTestFSM(tb testing.TB, dir string) *FSM {
	tb.Helper()
	f, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{NoSync: true}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

func procBatch(tb testing.TB, ws ...Write) []byte {
	tb.Helper()
	b, err := EncodeProcBatch(ws...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func cmdLog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// sampleLogs is a log exercising every kind of change, including a proc
// inserted and deleted within one batch, a key put then deleted, and the
// highest proc id deleted (MaxProcID must remember it).
func sampleLogs(tb testing.TB) []*raft.Log {
	p := func(id uint64, s string) store.Proc { return store.Proc{ID: id, Data: []byte(s)} }
	return []*raft.Log{
		cmdLog(1, procBatch(tb, Write{Inserts: []store.Proc{p(1, "a1"), p(2, "b1")}, Mutations: []Mutation{Put("table/t1", []byte("enabled"))}})),
		{Index: 2, Term: 1, Type: raft.LogConfiguration},
		cmdLog(3, procBatch(tb,
			Write{Updates: []store.Proc{p(1, "a2")}, Mutations: []Mutation{Put("region/r1", []byte("open@rs1")), Put("region/r2", []byte("closed"))}},
			Write{Inserts: []store.Proc{p(3, "c1"), p(9, "z1")}},
		)),
		cmdLog(4, procBatch(tb, Write{Deletes: []uint64{2, 9}, Mutations: []Mutation{Del("region/r2"), Put("table/t2", []byte("disabled")), Del("absent")}})),
		cmdLog(5, EncodeNoop()),
		cmdLog(6, procBatch(tb, Write{Updates: []store.Proc{p(3, "c2")}, Mutations: []Mutation{Put("table/t1", []byte("disabled"))}})),
	}
}

func checkResps(tb testing.TB, resps []any) {
	tb.Helper()
	for i, r := range resps {
		if r != nil {
			tb.Fatalf("response %d: %v", i, r)
		}
	}
}

func TestFSMApplyAndRead(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	checkResps(t, f.ApplyBatch(sampleLogs(t)))
	d := dumpOf(t, f)
	want := dump{
		procs: map[uint64]string{1: "a2", 3: "c2"},
		kv:    map[string]string{"table/t1": "disabled", "table/t2": "disabled", "region/r1": "open@rs1"},
		maxID: 9, index: 6,
	}
	if !d.equal(want) {
		t.Fatalf("state %+v, want %+v", d, want)
	}
	var keys []string
	f.Scan("table/", func(k string, _ []byte) bool { keys = append(keys, k); return true })
	if strings.Join(keys, ",") != "table/t1,table/t2" {
		t.Fatalf("Scan(table/) = %v", keys)
	}
	if v, ok := f.Get("region/r1"); !ok || string(v) != "open@rs1" {
		t.Fatalf("Get = %q %v", v, ok)
	}
	if _, ok := f.Get("region/r2"); ok {
		t.Fatal("deleted key still present")
	}
	if got := f.WALIndex(); got != 6 {
		t.Fatalf("WALIndex %d, want 6", got)
	}
}

// A lone Apply (not batched) must behave like ApplyBatch.
func TestFSMApplySingle(t *testing.T) {
	a, b := newTestFSM(t, t.TempDir()), newTestFSM(t, "")
	checkResps(t, a.ApplyBatch(sampleLogs(t)))
	for _, l := range sampleLogs(t) {
		if r := b.Apply(l); r != nil {
			t.Fatal(r)
		}
	}
	if da, db := dumpOf(t, a), dumpOf(t, b); !da.equal(db) {
		t.Fatalf("batched %v != single %v", da, db)
	}
}

func TestFSMRefusals(t *testing.T) {
	unknown := func(typ int32, ignore bool) []byte {
		b, err := EncodeCommand(raftpb.CommandType(typ), ignore, []byte("future stuff"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	badOp := func() []byte {
		pb := &raftpb.ProcBatch{Writes: []*raftpb.ProcWrite{
			{Inserts: []*raftpb.Proc{{Id: 50, Data: []byte("x")}}},
			{Mutations: []*raftpb.Mutation{{Op: raftpb.Mutation_OP_PUT, Key: []byte("k")}, {Op: 7, Key: []byte("k2")}}},
		}}
		payload, _ := proto.Marshal(pb)
		b, _ := EncodeCommand(raftpb.CommandType_COMMAND_TYPE_PROC_BATCH, false, payload)
		return b
	}
	reserved := func() []byte {
		pb := &raftpb.ProcBatch{Writes: []*raftpb.ProcWrite{
			{Inserts: []*raftpb.Proc{{Id: 51, Data: []byte("x")}}},
			{Updates: []*raftpb.Proc{{Id: walMetaID, Data: []byte("evil")}}},
		}}
		payload, _ := proto.Marshal(pb)
		b, _ := EncodeCommand(raftpb.CommandType_COMMAND_TYPE_PROC_BATCH, false, payload)
		return b
	}
	garbledPayload := func() []byte {
		b, _ := EncodeCommand(raftpb.CommandType_COMMAND_TYPE_PROC_BATCH, false, []byte{0xff, 0xff, 0xff})
		return b
	}
	random := make([]byte, 200)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	cases := []struct {
		name string
		data []byte
		want error // nil: skipped without error
	}{
		{"unknown optional", unknown(99, true), nil},
		{"unknown mandatory", unknown(98, false), ErrUnknownCommand},
		{"unknown mutation op", badOp(), ErrUnknownCommand},
		{"reserved proc id", reserved(), ErrInvalidCommand},
		{"garbled payload", garbledPayload(), ErrInvalidCommand},
		{"empty", nil, ErrNotCommand},
		{"random bytes", random, ErrNotCommand},
		{"bad version", append([]byte{magic0, magic1, 9}, random...), ErrNotCommand},
		{"magic then garbage", append([]byte{magic0, magic1, formatVersion}, 0xff, 0xff, 0xff), ErrNotCommand},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newTestFSM(t, dir)
			checkResps(t, f.ApplyBatch(sampleLogs(t)))
			before := dumpOf(t, f)
			walBefore := f.Stats().WALAppends
			resp := f.Apply(cmdLog(7, tc.data))
			if tc.want == nil {
				if resp != nil {
					t.Fatalf("response %v, want nil", resp)
				}
			} else if err, _ := resp.(error); !errors.Is(err, tc.want) {
				t.Fatalf("response %v, want %v", resp, tc.want)
			}
			after := dumpOf(t, f)
			before.index = 7 // the entry is consumed either way
			if !after.equal(before) {
				t.Fatalf("state changed: %v -> %v", before, after)
			}
			if f.Stats().WALAppends != walBefore {
				t.Fatal("refused or skipped entry was written to the WAL")
			}
			// The node goes on applying.
			if r := f.Apply(cmdLog(8, procBatch(t, Write{Inserts: []store.Proc{{ID: 20, Data: []byte("ok")}}}))); r != nil {
				t.Fatal(r)
			}
			if _, ok := f.Proc(20); !ok {
				t.Fatal("entry after a refused one not applied")
			}
		})
	}
}

func TestFSMRestartSkipsApplied(t *testing.T) {
	dir := t.TempDir()
	logs := sampleLogs(t)
	f := newTestFSM(t, dir)
	checkResps(t, f.ApplyBatch(logs[:3]))
	checkResps(t, f.ApplyBatch(logs[3:]))
	want := dumpOf(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	g := newTestFSM(t, dir)
	if g.LoadedIndex() != 6 {
		t.Fatalf("LoadedIndex %d, want 6", g.LoadedIndex())
	}
	if got := dumpOf(t, g); !got.equal(want) {
		t.Fatalf("reloaded %v, want %v", got, want)
	}
	// Raft replays the whole log: nothing changes, nothing is written.
	checkResps(t, g.ApplyBatch(logs))
	for _, l := range logs {
		g.Apply(l)
	}
	if got := dumpOf(t, g); !got.equal(want) {
		t.Fatalf("after replay %v, want %v", got, want)
	}
	if n := g.Stats().WALAppends; n != 0 {
		t.Fatalf("replay wrote %d WAL records", n)
	}
	// New entries still apply and persist, with keys that keep their WAL ids.
	checkResps(t, g.ApplyBatch([]*raft.Log{
		cmdLog(7, procBatch(t, Write{Updates: []store.Proc{{ID: 1, Data: []byte("a3")}}, Mutations: []Mutation{Put("table/t1", []byte("enabled")), Put("new", []byte("n"))}})),
	}))
	want = dumpOf(t, g)
	g.Close()
	h := newTestFSM(t, dir)
	if got := dumpOf(t, h); !got.equal(want) || h.LoadedIndex() != 7 {
		t.Fatalf("second reload %v (W %d), want %v", got, h.LoadedIndex(), want)
	}
}

// A mixed batch with the replayed prefix and new entries applies only the new.
func TestFSMPartialReplay(t *testing.T) {
	dir := t.TempDir()
	logs := sampleLogs(t)
	f := newTestFSM(t, dir)
	checkResps(t, f.ApplyBatch(logs[:3]))
	f.Close()
	g := newTestFSM(t, dir)
	checkResps(t, g.ApplyBatch(logs))
	ref := newTestFSM(t, "")
	checkResps(t, ref.ApplyBatch(logs))
	if a, b := dumpOf(t, g), dumpOf(t, ref); !a.equal(b) {
		t.Fatalf("replayed %v, reference %v", a, b)
	}
}

func snapshotBytes(tb testing.TB, f *FSM) []byte {
	tb.Helper()
	s, err := f.Snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Release()
	sink := &bufSink{}
	if err := s.Persist(sink); err != nil {
		tb.Fatal(err)
	}
	if !sink.closed {
		tb.Fatal("sink not closed")
	}
	return sink.Bytes()
}

func TestSnapshotRestore(t *testing.T) {
	src := newTestFSM(t, t.TempDir())
	checkResps(t, src.ApplyBatch(sampleLogs(t)))
	// Enough data to need several restore batches.
	var ws []Write
	for i := range 500 {
		ws = append(ws, Write{
			Inserts:   []store.Proc{{ID: uint64(100 + i), Data: bytes.Repeat([]byte{byte(i)}, 300)}},
			Mutations: []Mutation{Put("k/"+string(rune('a'+i%26))+"/"+string(rune('0'+i%10)), []byte{byte(i)})},
		})
	}
	checkResps(t, src.ApplyBatch([]*raft.Log{cmdLog(7, procBatch(t, ws...))}))
	want := dumpOf(t, src)

	// Snapshot is a point in time: later applies do not show in it.
	snap, _ := src.Snapshot()
	checkResps(t, src.ApplyBatch([]*raft.Log{cmdLog(8, procBatch(t, Write{Deletes: []uint64{100, 101}}))}))
	sink := &bufSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	data := sink.Bytes()

	dir := t.TempDir()
	dst, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{NoSync: true}, RestoreBatchBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	// dst had state of its own, which the restore replaces.
	checkResps(t, dst.ApplyBatch([]*raft.Log{cmdLog(1, procBatch(t, Write{Inserts: []store.Proc{{ID: 77, Data: []byte("x")}}, Mutations: []Mutation{Put("stale", nil)}}))}))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if got := dumpOf(t, dst); !got.equal(want) {
		t.Fatalf("restored %v, want %v", got, want)
	}
	if dst.WALIndex() != 7 {
		t.Fatalf("WAL index after restore %d, want 7", dst.WALIndex())
	}
	// The restored WAL is what a restart loads.
	dst.Close()
	re := newTestFSM(t, dir)
	if got := dumpOf(t, re); !got.equal(want) || re.LoadedIndex() != 7 {
		t.Fatalf("reloaded after restore %v (W %d), want %v", got, re.LoadedIndex(), want)
	}
	// Only the CURRENT WAL directory is left.
	ents, _ := os.ReadDir(dir)
	var wals []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "wal-") {
			wals = append(wals, e.Name())
		}
	}
	if len(wals) != 1 || wals[0] != "wal-00000000000000000002" {
		t.Fatalf("WAL dirs after restore: %v", wals)
	}
	// The restored FSM keeps applying, new keys do not collide with restored ones.
	checkResps(t, re.ApplyBatch([]*raft.Log{cmdLog(8, procBatch(t, Write{Mutations: []Mutation{Put("zz-new", []byte("1")), Put("table/t1", []byte("x"))}}))}))
	want2 := dumpOf(t, re)
	re.Close()
	re2 := newTestFSM(t, dir)
	if got := dumpOf(t, re2); !got.equal(want2) {
		t.Fatalf("reload after post-restore apply %v, want %v", got, want2)
	}

	// Memory-only FSMs restore too.
	mem := newTestFSM(t, "")
	if err := mem.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if got := dumpOf(t, mem); !got.equal(want) {
		t.Fatalf("memory restore %v, want %v", got, want)
	}
}

// A bad or truncated stream leaves the FSM and its WAL as they were, and no
// half-restored WAL directory behind.
func TestRestoreRefusesBadSnapshot(t *testing.T) {
	src := newTestFSM(t, "")
	checkResps(t, src.ApplyBatch(sampleLogs(t)))
	data := snapshotBytes(t, src)
	aboveMax := &raftpb.SnapshotHeader{Index: 3, MaxProcId: 5, Procs: 1}
	twoKeys := &raftpb.SnapshotHeader{Index: 3, Kvs: 2}

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte("XXXX"), data[4:]...)},
		{"truncated", data[:len(data)/2]},
		{"no end record", data[:len(data)-10]},
		{"garbage", bytes.Repeat([]byte{0xff}, 100)},
		{"huge length", append(append([]byte(nil), snapMagic[:]...), 0xff, 0xff, 0xff, 0xff, 0x0f)},
		// What the snapshot file reader refuses in a file's body, Restore
		// refuses in raft's stream (one reader): a procedure above the
		// max id (its id would be given again), entries out of order.
		{"procedure above max id", craftStream(t, aboveMax, procRec(6), endRec(aboveMax))},
		{"keys out of order", craftStream(t, twoKeys, kvRec("b"), kvRec("a"), endRec(twoKeys))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newTestFSM(t, dir)
			checkResps(t, f.ApplyBatch([]*raft.Log{cmdLog(1, procBatch(t, Write{Inserts: []store.Proc{{ID: 5, Data: []byte("mine")}}}))}))
			before := dumpOf(t, f)
			err := f.Restore(io.NopCloser(bytes.NewReader(tc.data)))
			if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "at offset") {
				t.Fatalf("Restore = %v, want ErrBadSnapshot naming the offset", err)
			}
			if got := dumpOf(t, f); !got.equal(before) {
				t.Fatalf("state changed by failed restore: %v", got)
			}
			if _, err := os.Stat(walDir(dir, 2)); !os.IsNotExist(err) {
				t.Fatalf("half-restored WAL dir left behind: %v", err)
			}
			f.Close()
			g := newTestFSM(t, dir)
			if got := dumpOf(t, g); !got.equal(before) {
				t.Fatalf("reload after failed restore %v, want %v", got, before)
			}
		})
	}
}

// A crash during restore, before CURRENT is switched, leaves a directory
// that the next open removes while it loads the old WAL.
func TestOpenRemovesOrphanWALDirs(t *testing.T) {
	dir := t.TempDir()
	f := newTestFSM(t, dir)
	checkResps(t, f.ApplyBatch(sampleLogs(t)))
	want := dumpOf(t, f)
	f.Close()
	// Simulate the crash: a fully written next-generation WAL, CURRENT not switched.
	orphan, err := store.OpenWAL(store.WALConfig{Dir: walDir(dir, 2), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Load(func(store.Proc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := orphan.Append(store.Batch{Updates: []store.Proc{{ID: 1, Data: []byte("from the orphan")}}, Index: 99}); err != nil {
		t.Fatal(err)
	}
	orphan.Close()
	os.WriteFile(filepath.Join(dir, "CURRENT.tmp"), []byte("wal-00000000000000000002\n"), 0o644)

	g := newTestFSM(t, dir)
	if got := dumpOf(t, g); !got.equal(want) {
		t.Fatalf("loaded %v, want the old WAL's %v", got, want)
	}
	if _, err := os.Stat(walDir(dir, 2)); !os.IsNotExist(err) {
		t.Fatalf("orphan WAL dir not removed: %v", err)
	}
}

func TestNewFSMRefusesBadCurrent(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("../../etc\n"), 0o644)
	if _, err := NewFSM(Config{Dir: dir}); err == nil {
		t.Fatal("NewFSM accepted a bad CURRENT file")
	}
}

// Readers run lock-free while entries apply; under -race this checks the
// published versions are never mutated.
func TestConcurrentReaders(t *testing.T) {
	f := newTestFSM(t, "")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := f.View()
				n := 0
				v.Scan("k/", func(string, []byte) bool { n++; return true })
				// Every entry puts one key and one proc: a view never shows half.
				if n != v.NumProcs() {
					t.Errorf("view at %d: %d keys, %d procs", v.Index(), n, v.NumProcs())
					return
				}
			}
		})
	}
	for i := range 300 {
		id := uint64(i + 1)
		f.Apply(cmdLog(id, procBatch(t, Write{Inserts: []store.Proc{{ID: id, Data: []byte("p")}}, Mutations: []Mutation{Put("k/"+string(rune(i)), []byte("v"))}})))
	}
	close(stop)
	wg.Wait()
}

func TestNeedsSnapshotRestore(t *testing.T) {
	snaps := raft.NewInmemSnapshotStore()
	if need, err := NeedsSnapshotRestore(snaps, 0); err != nil || need {
		t.Fatalf("no snapshots: %v %v", need, err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 100, 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.Close()
	for _, tc := range []struct {
		w    uint64
		want bool
	}{{50, true}, {99, true}, {100, false}, {150, false}} {
		if need, err := NeedsSnapshotRestore(snaps, tc.w); err != nil || need != tc.want {
			t.Errorf("W=%d: %v %v, want %v", tc.w, need, err, tc.want)
		}
	}
}

// ProcsBefore walks the procedures below an id newest first, and
// WALStats describes the local WAL (none for a memory-only FSM).
func TestProcsBeforeAndWALStats(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	for _, id := range []uint64{3, 5, 9, 12} {
		f.Apply(cmdLog(id, procBatch(t, Write{Inserts: []store.Proc{{ID: id, Data: []byte("p")}}})))
	}
	walk := func(before uint64) []uint64 {
		var ids []uint64
		if err := f.View().ProcsBefore(before, func(p store.Proc) error {
			ids = append(ids, p.ID)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, tc := range []struct {
		before uint64
		want   string
	}{{^uint64(0), "[12 9 5 3]"}, {12, "[9 5 3]"}, {10, "[9 5 3]"}, {5, "[3]"}, {3, "[]"}, {0, "[]"}} {
		if got := fmt.Sprint(walk(tc.before)); got != tc.want {
			t.Errorf("before %d: %s, want %s", tc.before, got, tc.want)
		}
	}
	if st, ok := f.WALStats(); !ok || st.Segments < 1 || st.Live < 4 || st.Bytes == 0 {
		t.Errorf("WALStats = %+v, %v: want a live segment, bytes and the 4 procedures live", st, ok)
	}
	if _, ok := newTestFSM(t, "").WALStats(); ok {
		t.Error("a memory-only FSM reports a WAL")
	}
}

// TestViewScanFrom: a scan resumes strictly after the key it is given and
// stays within its prefix, whatever that key is.
func TestViewScanFrom(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	var muts []Mutation
	for _, k := range []string{"a/x", "r/a", "r/a0", "r/b", "r/c", "s/a"} {
		muts = append(muts, Put(k, []byte(k)))
	}
	f.Apply(cmdLog(1, procBatch(t, Write{Mutations: muts})))
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          string
	}{
		{"r/", "", 0, "r/a r/a0 r/b r/c"},
		{"r/", "a", 0, "r/a r/a0 r/b r/c"},   // below the prefix: from its start
		{"r/", "r/a", 0, "r/a0 r/b r/c"},     // strictly after
		{"r/", "r/a\x00", 0, "r/a0 r/b r/c"}, // between two keys
		{"r/", "r/a0", 0, "r/b r/c"},
		{"r/", "r/bb", 0, "r/c"}, // a key that was deleted (or never was)
		{"r/", "r/c", 0, ""},
		{"r/", "s/", 0, ""}, // past the prefix
		{"r/", "", 2, "r/a r/a0"},
		{"", "r/c", 0, "s/a"},
	} {
		var got []string
		f.View().ScanFrom(tc.prefix, tc.after, func(k string, v []byte) bool {
			if string(v) != k {
				t.Errorf("value of %s = %q", k, v)
			}
			got = append(got, k)
			return tc.limit == 0 || len(got) < tc.limit
		})
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("ScanFrom(%q, %q) = %q, want %q", tc.prefix, tc.after, s, tc.want)
		}
	}
}
