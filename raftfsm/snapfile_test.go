package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/memstat"
)

func sampleFile(tb testing.TB) (*FSM, []byte) {
	tb.Helper()
	f := newTestFSM(tb, "")
	checkResps(tb, f.ApplyBatch(sampleLogs(tb)))
	var buf bytes.Buffer
	h := SnapshotFileHeader{ClusterID: "c0ffee", Term: 7, CreatedUnixMs: 1700000000000, TakenBy: "client/alice", ServedBy: "m1", Version: "0.2.0", ClusterFormat: 2}
	if err := WriteSnapshotFile(&buf, h, f.View()); err != nil {
		tb.Fatal(err)
	}
	return f, buf.Bytes()
}

// readAll reads a snapshot file through and returns its header and entries.
func readAll(b []byte) (SnapshotFileHeader, []SnapshotEntry, error) {
	sr, err := OpenSnapshotFile(bytes.NewReader(b))
	if err != nil {
		return SnapshotFileHeader{}, nil, err
	}
	var out []SnapshotEntry
	for {
		e, err := sr.Next()
		if err == io.EOF {
			return sr.Header(), out, nil
		}
		if err != nil {
			return sr.Header(), out, err
		}
		out = append(out, e)
	}
}

func TestSnapshotFileRoundTrip(t *testing.T) {
	f, b := sampleFile(t)
	h, entries, err := readAll(b)
	if err != nil {
		t.Fatal(err)
	}
	want := SnapshotFileHeader{ClusterID: "c0ffee", Index: 6, Term: 7, CreatedUnixMs: 1700000000000, TakenBy: "client/alice", ServedBy: "m1", Version: "0.2.0", ClusterFormat: 2,
		Procs: 2, Keys: 3, MaxProcID: 9}
	if h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	var procs, keys int
	for _, e := range entries {
		if e.Proc != nil {
			procs++
			if got, _ := f.Proc(e.Proc.ID); !bytes.Equal(got, e.Proc.Data) {
				t.Errorf("procedure %d: %q, state holds %q", e.Proc.ID, e.Proc.Data, got)
			}
			continue
		}
		keys++
		if got, _ := f.Get(e.Key); !bytes.Equal(got, e.Value) {
			t.Errorf("key %s: %q, state holds %q", e.Key, e.Value, got)
		}
	}
	if procs != 2 || keys != 3 {
		t.Fatalf("%d procedures and %d keys, want 2 and 3", procs, keys)
	}
}

// A file damaged anywhere, cut anywhere, or not a snapshot file at all is
// refused, naming the offset and the field.
func TestSnapshotFileRefusesDamage(t *testing.T) {
	_, good := sampleFile(t)
	for off := range good {
		bad := bytes.Clone(good)
		bad[off] ^= 0x5a
		_, _, err := readAll(bad)
		var fe *SnapshotFileError
		if !errors.As(err, &fe) || !errors.Is(err, ErrBadSnapshotFile) {
			t.Fatalf("byte %d flipped: %v, want a *SnapshotFileError", off, err)
		}
		if !strings.Contains(err.Error(), "at offset") {
			t.Fatalf("byte %d flipped: %v names no offset", off, err)
		}
	}
	for n := range len(good) {
		_, _, err := readAll(good[:n])
		var fe *SnapshotFileError
		if !errors.As(err, &fe) {
			t.Fatalf("cut at %d: %v, want a *SnapshotFileError", n, err)
		}
	}
	if _, _, err := readAll(append(bytes.Clone(good), 0)); err == nil || !strings.Contains(err.Error(), "follow the trailer") {
		t.Fatalf("a byte after the trailer: %v", err)
	}
	rnd := make([]byte, 4096)
	for i := range rnd {
		rnd[i] = byte(rand.Uint32())
	}
	if _, _, err := readAll(rnd); err == nil || !strings.Contains(err.Error(), "magic at offset 0") {
		t.Fatalf("random bytes: %v", err)
	}
	f, _ := sampleFile(t)
	raftState := snapshotBytes(t, f)
	if _, _, err := readAll(raftState); err == nil || !strings.Contains(err.Error(), "raft snapshot") {
		t.Fatalf("a raft snapshot's state.bin: %v", err)
	}
	t.Logf("e.g. %v", func() error { _, _, err := readAll(good[:len(good)-10]); return err }())
}

// A checksum mismatch names the checksum: a flipped byte inside a value
// keeps the structure.
func TestSnapshotFileChecksumNamed(t *testing.T) {
	_, good := sampleFile(t)
	i := bytes.Index(good, []byte("open@rs1"))
	bad := bytes.Clone(good)
	bad[i] = 'O'
	_, _, err := readAll(bad)
	if err == nil || !strings.Contains(err.Error(), "checksum at offset") {
		t.Fatalf("a value changed: %v", err)
	}
}

// slowWriter takes its time with each write, as a client on a slow link
// does, and samples the heap now and then.
type slowWriter struct {
	n      int64
	peak   uint64
	writes int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	w.writes++
	if w.writes%64 == 0 {
		if h := memstat.HeapAfterGC(); h > w.peak {
			w.peak = h
		}
	}
	return len(p), nil
}

// TestSnapshotFileMemoryBounded writes a file of 200,000 regions and checks
// the heap grows by little more than the writer's buffer meanwhile: the
// file is written from the immutable state version, not built in memory.
func TestSnapshotFileMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 200,000 regions")
	}
	const n = 200_000
	f := newTestFSM(t, "")
	regionWorkload(t, f, n, false)
	runtime.GC()
	base := memstat.HeapAfterGC()
	w := &slowWriter{}
	start := time.Now()
	if err := WriteSnapshotFile(w, SnapshotFileHeader{}, f.View()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	growth := int64(w.peak) - int64(base)
	t.Logf("%d regions: %d MB file in %v; heap %d MB before, peak growth %d KB", n, w.n>>20, took, base>>20, growth>>10)
	if growth > 8<<20 {
		t.Fatalf("heap grew by %d KB writing a %d MB file", growth>>10, w.n>>20)
	}
	runtime.KeepAlive(f)
}

// VerifySnapshotFile accepts a whole file and refuses one with a byte
// changed anywhere past the magic.
func TestVerifySnapshotFile(t *testing.T) {
	_, b := sampleFile(t)
	h, err := VerifySnapshotFile(bytes.NewReader(b))
	if err != nil || h.Index != 6 || h.Procs != 2 {
		t.Fatalf("header %+v, %v", h, err)
	}
	for _, at := range []int{9, 20, len(b) / 2, len(b) - 40, len(b) - 1} {
		bad := bytes.Clone(b)
		bad[at] ^= 0x40
		if _, err := VerifySnapshotFile(bytes.NewReader(bad)); !errors.Is(err, ErrBadSnapshotFile) {
			t.Errorf("byte %d changed: %v, want ErrBadSnapshotFile", at, err)
		}
	}
	if _, err := VerifySnapshotFile(bytes.NewReader(b[:len(b)-1])); !errors.Is(err, ErrBadSnapshotFile) {
		t.Errorf("truncated: %v", err)
	}
}
