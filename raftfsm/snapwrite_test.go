package raftfsm

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// A stream rewritten entry by entry from a snapshot file is, byte for
// byte, the stream the FSM itself writes: a restore's raft snapshot is one
// Restore reads as any other.
func TestStreamWriterWritesWhatPersistWrites(t *testing.T) {
	f, file := sampleFile(t)
	var want bytes.Buffer
	if err := f.View().WriteSnapshot(&want); err != nil {
		t.Fatal(err)
	}
	h, entries, err := readAll(file)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	sw, err := NewStreamWriter(&got, h.Index, h.MaxProcID, h.Procs, h.Keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Proc != nil {
			err = sw.Proc(e.Proc.ID, e.Proc.Data)
		} else {
			err = sw.Key(e.Key, e.Value)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("rewritten stream differs from the FSM's (%d bytes, want %d)", got.Len(), want.Len())
	}
	g := newTestFSM(t, t.TempDir())
	if err := g.Restore(io.NopCloser(bytes.NewReader(got.Bytes()))); err != nil {
		t.Fatalf("restore of the rewritten stream: %v", err)
	}
	if g.AppliedIndex() != h.Index || g.View().NumKeys() != int(h.Keys) {
		t.Fatalf("restored index %d, %d keys; want %d, %d", g.AppliedIndex(), g.View().NumKeys(), h.Index, h.Keys)
	}
}

func TestStreamWriterRefusesWhatRestoreWould(t *testing.T) {
	for name, write := range map[string]func(*StreamWriter) error{
		"fewer than announced": func(sw *StreamWriter) error { return sw.Key("a", nil) },
		"key before procedure": func(sw *StreamWriter) error { sw.Key("a", nil); return sw.Proc(1, nil) },
		"keys out of order":    func(sw *StreamWriter) error { sw.Key("b", nil); return sw.Key("a", nil) },
		"id above the max id":  func(sw *StreamWriter) error { return sw.Proc(2, nil) },
		"more than announced": func(sw *StreamWriter) error {
			sw.Proc(1, nil)
			sw.Key("a", nil)
			sw.Key("b", nil)
			return sw.Key("c", nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			sw, err := NewStreamWriter(&bytes.Buffer{}, 5, 1, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			err = write(sw)
			if err == nil {
				err = sw.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "snapshot stream") {
				t.Fatalf("got %v, want a refusal", err)
			}
		})
	}
}
