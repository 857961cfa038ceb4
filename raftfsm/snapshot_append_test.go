package raftfsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
)

// framed is how a snapshot framed every record before the hand-written
// encoders: its proto size as a uvarint, then proto.Marshal of it.
func framed(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

// TestSnapshotRecordsAsProtoFramesThem: the records a snapshot writes are
// byte for byte the framed proto.Marshal of the same SnapshotRecord, so a
// snapshot written now is the one 0.1.0 wrote (and reads), at the sizes
// where a length's varint grows a byte, with empty and zero fields that
// proto3 leaves out, and at random.
func TestSnapshotRecordsAsProtoFramesThem(t *testing.T) {
	sizes := []int{0, 1, 2, 100, 115, 116, 117, 127, 128, 129, 16371, 16372, 16383, 16384, 16385, 1 << 21}
	ids := []uint64{0, 1, 127, 128, 1<<32 + 5, math.MaxUint64}
	blob := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	check := func(what string, got []byte, m proto.Message) {
		t.Helper()
		if want := framed(t, m); !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, want %d (first difference at %d)", what, len(got), len(want), firstDiff(got, want))
		}
	}
	prefix := []byte("before")
	for _, id := range ids {
		for _, n := range sizes {
			for _, data := range [][]byte{blob(n, 'd'), nil} {
				got := appendSnapshotProc(bytes.Clone(prefix), id, data)
				if !bytes.HasPrefix(got, prefix) {
					t.Fatal("the buffer's bytes before the record were overwritten")
				}
				check("proc", got[len(prefix):], &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: &raftpb.Proc{Id: id, Data: data}}})
			}
		}
	}
	for _, kn := range sizes {
		for _, vn := range sizes {
			key := strings.Repeat("k", kn)
			for _, value := range [][]byte{blob(vn, 'v'), {}} {
				got := appendSnapshotKV(nil, key, value)
				check("kv", got, &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: &raftpb.KV{Key: []byte(key), Value: value}}})
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	for range 2000 {
		key, value := blob(r.IntN(300), byte(r.Uint32())), blob(r.IntN(5000), byte(r.Uint32()))
		buf = appendSnapshotKV(buf[:0], string(key), value)
		check("random kv", buf, &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: &raftpb.KV{Key: key, Value: value}}})
		id := r.Uint64() >> r.IntN(64)
		buf = appendSnapshotProc(buf[:0], id, value)
		check("random proc", buf, &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: &raftpb.Proc{Id: id, Data: value}}})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// protoStream writes st as writeStream wrote it before the hand-written
// record encoders, every record through proto.Marshal: the reference
// TestSnapshotStreamAsBefore compares against, and the baseline of
// BenchmarkSnapshotWrite.
func protoStream(tb testing.TB, st *state, w io.Writer) {
	tb.Helper()
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(snapMagic[:])
	hdr := &raftpb.SnapshotHeader{Index: st.index, MaxProcId: st.maxProcID, Procs: uint64(st.procs.Len()), Kvs: uint64(st.kv.Len())}
	var buf []byte
	put := func(m proto.Message) bool {
		buf = binary.AppendUvarint(buf[:0], uint64(proto.Size(m)))
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, m); err != nil {
			tb.Fatal(err)
		}
		bw.Write(buf)
		return true
	}
	put(hdr)
	proc := &raftpb.Proc{}
	rec := &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: proc}}
	st.procs.Ascend(func(p *procItem) bool {
		proc.Id, proc.Data = p.id, p.data
		return put(rec)
	})
	kv := &raftpb.KV{}
	rec = &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: kv}}
	var keyBuf []byte
	st.kv.Ascend(func(e *kvItem) bool {
		keyBuf = append(keyBuf[:0], e.key()...)
		kv.Key, kv.Value = keyBuf, e.val()
		return put(rec)
	})
	put(&raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_End{End: hdr}})
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// TestSnapshotStreamAsBefore: a whole snapshot of regions and procedures
// is the stream the proto-marshalled records made.
func TestSnapshotStreamAsBefore(t *testing.T) {
	f := newTestFSM(t, "")
	regionWorkload(t, f, 3000, true)
	var got, want bytes.Buffer
	if err := f.View().WriteSnapshot(&got); err != nil {
		t.Fatal(err)
	}
	protoStream(t, f.View().st, &want)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("snapshot of %d bytes, the proto records' %d (first difference at %d)", got.Len(), want.Len(), firstDiff(got.Bytes(), want.Bytes()))
	}
}

// BenchmarkSnapshotWrite writes the snapshot of 100,000 regions with a
// live procedure each to io.Discard: "proto" marshals every record as
// before (the baseline), "append" is writeStream.
//
//	go test -run '^$' -bench SnapshotWrite ./raftfsm/
func BenchmarkSnapshotWrite(b *testing.B) {
	f := newTestFSM(b, "")
	regionWorkload(b, f, 100_000, true)
	st := f.View().st
	records := float64(st.procs.Len() + st.kv.Len())
	b.Run("proto", func(b *testing.B) {
		for range b.N {
			protoStream(b, st, io.Discard)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/records, "ns/record")
	})
	b.Run("append", func(b *testing.B) {
		for range b.N {
			if err := writeStream(st, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/records, "ns/record")
	})
}
