package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

// FuzzSnapshotRecords: for any id, key and value, the hand-framed
// records are the framed proto.Marshal of the same SnapshotRecord, and
// append after whatever the buffer held.
//
//	go test ./raftfsm -run '^$' -fuzz FuzzSnapshotRecords -fuzztime 20s -parallel 1
func FuzzSnapshotRecords(f *testing.F) {
	f.Add(uint64(0), "", []byte(nil), []byte(nil))
	f.Add(uint64(0), "", []byte{}, []byte("x"))
	f.Add(uint64(1), "k", []byte{0}, []byte{})
	f.Add(^uint64(0), "\x00\xff", bytes.Repeat([]byte{0x80}, 125), []byte("pre"))
	f.Add(uint64(1)<<63, strings.Repeat("k", 16380), bytes.Repeat([]byte{1}, 16382), []byte(nil))
	f.Fuzz(func(t *testing.T, id uint64, key string, value, prefix []byte) {
		gotP := appendSnapshotProc(bytes.Clone(prefix), id, value)
		if !bytes.HasPrefix(gotP, prefix) {
			t.Fatal("proc: prefix overwritten")
		}
		if want := framed(t, &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: &raftpb.Proc{Id: id, Data: value}}}); !bytes.Equal(gotP[len(prefix):], want) {
			t.Fatalf("proc id %d, %d bytes: % x, want % x", id, len(value), gotP[len(prefix):], want)
		}
		gotK := appendSnapshotKV(bytes.Clone(prefix), key, value)
		if !bytes.HasPrefix(gotK, prefix) {
			t.Fatal("kv: prefix overwritten")
		}
		if want := framed(t, &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: &raftpb.KV{Key: []byte(key), Value: value}}}); !bytes.Equal(gotK[len(prefix):], want) {
			t.Fatalf("kv key %d bytes, value %d bytes: differ", len(key), len(value))
		}
	})
}

// TestSnapshotEdgeStateRoundTrip: a state with the records at their
// edges (the highest procedure id, empty procedure data and key values,
// binary keys, values at a length's varint boundaries) is written as the
// proto records wrote it, and read back whole by Restore and by the
// snapshot file reader.
func TestSnapshotEdgeStateRoundTrip(t *testing.T) {
	f := newTestFSM(t, "")
	p := func(id uint64, n int) store.Proc { return store.Proc{ID: id, Data: bytes.Repeat([]byte{'p'}, n)} }
	w := Write{
		Inserts: []store.Proc{p(1, 0), p(2, 1), p(127, 116), p(128, 16372), p(MaxProcID, 200000)},
		Mutations: []Mutation{
			Put("\x00", nil), Put("e", []byte{}), Put("k\xff\x80", []byte{0}),
			Put(strings.Repeat("k", 127), bytes.Repeat([]byte{'v'}, 16371)),
			Put("z", bytes.Repeat([]byte{0xff}, 1<<17)),
		},
	}
	checkResps(t, f.ApplyBatch([]*raft.Log{cmdLog(1, procBatch(t, w))}))
	var got, want bytes.Buffer
	if err := f.View().WriteSnapshot(&got); err != nil {
		t.Fatal(err)
	}
	protoStream(t, f.View().st, &want)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("snapshot differs from the proto records' at byte %d", firstDiff(got.Bytes(), want.Bytes()))
	}
	before := dumpOf(t, f)
	if len(before.procs) != 5 || len(before.kv) != 5 {
		t.Fatalf("state %d procs %d keys, want 5 and 5", len(before.procs), len(before.kv))
	}
	g := newTestFSM(t, "")
	if err := g.Restore(io.NopCloser(bytes.NewReader(got.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if after := dumpOf(t, g); !after.equal(before) {
		t.Fatalf("restored state differs")
	}
	var file bytes.Buffer
	if err := WriteSnapshotFile(&file, SnapshotFileHeader{}, f.View()); err != nil {
		t.Fatal(err)
	}
	sr, err := OpenSnapshotFile(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	procs, keys := 0, 0
	for {
		e, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Proc != nil {
			if string(e.Proc.Data) != before.procs[e.Proc.ID] {
				t.Fatalf("file: procedure %d data differs", e.Proc.ID)
			}
			procs++
		} else {
			if v, ok := before.kv[e.Key]; !ok || v != string(e.Value) {
				t.Fatalf("file: key %q differs", e.Key)
			}
			keys++
		}
	}
	if procs != 5 || keys != 5 {
		t.Fatalf("file: %d procs %d keys", procs, keys)
	}
}
