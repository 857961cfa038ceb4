package raftfsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

// TestFenceTerm: a batch written for term T applies only in an entry of
// term T; in any other term it is refused and changes nothing.
func TestFenceTerm(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	batch := func(term uint64, id uint64) []byte {
		b, err := EncodeFencedProcBatch(term, Write{Updates: []store.Proc{{ID: id, Data: []byte("x")}}, Mutations: []Mutation{Put("k", []byte("v"))}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	resps := f.ApplyBatch([]*raft.Log{
		{Index: 1, Term: 5, Type: raft.LogCommand, Data: batch(4, 1)}, // stale executor
		{Index: 2, Term: 5, Type: raft.LogCommand, Data: batch(6, 2)}, // not this term either
		{Index: 3, Term: 5, Type: raft.LogCommand, Data: batch(5, 3)}, // the current leader's
		{Index: 4, Term: 5, Type: raft.LogCommand, Data: batch(0, 4)}, // unfenced
	})
	for i, want := range []bool{true, true, false, false} {
		err, _ := resps[i].(error)
		if got := errors.Is(err, ErrFenced); got != want {
			t.Errorf("entry %d: response %v, fenced=%v want %v", i+1, resps[i], got, want)
		}
	}
	for id, want := range map[uint64]bool{1: false, 2: false, 3: true, 4: true} {
		if _, ok := f.Proc(id); ok != want {
			t.Errorf("proc %d present=%v, want %v", id, ok, want)
		}
	}
}

// EncodeFencedProcBatch marshals the batch straight into its envelope:
// the bytes are those of EncodeCommand around the marshalled batch.
func TestProcBatchEncodesAsItsEnvelope(t *testing.T) {
	for _, ws := range [][]Write{
		nil,
		{{}},
		{{Inserts: []store.Proc{{ID: 1, Data: []byte("parent")}, {ID: 2, Data: make([]byte, 300)}}, Mutations: []Mutation{Put("k", []byte("v")), Del("d")}},
			{Updates: []store.Proc{{ID: 3, Data: []byte("x")}}, Deletes: []uint64{4, 5}}},
	} {
		for _, term := range []uint64{0, 7} {
			got, err := EncodeFencedProcBatch(term, ws...)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := releaseProcBatch(t, term, ws)
			if !bytes.Equal(got, want) {
				t.Errorf("term %d, %d writes: encoded\n%x\nwant\n%x", term, len(ws), got, want)
			}
		}
	}
}

// releaseProcBatch is the release's encoding of a batch: marshalled on
// its own, then framed by EncodeCommand. It returns the entry and its
// payload.
func releaseProcBatch(t *testing.T, term uint64, ws []Write) (entry, payload []byte) {
	t.Helper()
	pb := &raftpb.ProcBatch{Writes: make([]*raftpb.ProcWrite, len(ws)), FenceTerm: term}
	for i := range ws {
		pb.Writes[i] = ws[i].toProto()
	}
	payload, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	entry, err = EncodeCommand(raftpb.CommandType_COMMAND_TYPE_PROC_BATCH, false, payload)
	if err != nil {
		t.Fatal(err)
	}
	return entry, payload
}

// decodeEnvelope reads an envelope as proto.Unmarshal does: the same
// fields, and an error for the same bytes, random ones included.
func TestEnvelopeDecodesAsProtoDoes(t *testing.T) {
	batch, err := EncodeProcBatch(Write{Updates: []store.Proc{{ID: 1, Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{batch[prefixLen:], EncodeNoop()[prefixLen:], nil,
		{0x08, 0x02, 0x08, 0x01}, // type twice: the last wins
		{0x10, 0x01, 0x1a, 0x00}, // ignore_if_unknown, empty payload
		{0x0a, 0x01, 0x00},       // type with the bytes wire type: unknown
		{0x20, 0x05, 0x08, 0x01}, // an unknown field first
		{0x1a, 0x05, 0x01},       // truncated payload
		{0x08},                   // truncated varint
		{0x00, 0x01},             // field number 0
	}
	rnd := uint64(1)
	for range 2000 {
		b := make([]byte, rnd%12)
		for i := range b {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			b[i] = byte(rnd >> 56)
		}
		inputs = append(inputs, b)
		rnd = rnd*6364136223846793005 + 1442695040888963407
	}
	for _, in := range inputs {
		data := append([]byte{magic0, magic1, formatVersion}, in...)
		got, gerr := decodeEnvelope(data)
		want := &raftpb.Envelope{}
		werr := proto.Unmarshal(in, want)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("% x: decodeEnvelope error %v, proto.Unmarshal's %v", in, gerr, werr)
		}
		if gerr == nil && (got.Type != want.Type || got.IgnoreIfUnknown != want.IgnoreIfUnknown || !bytes.Equal(got.Payload, want.Payload)) {
			t.Fatalf("% x: decodeEnvelope %v, proto.Unmarshal %v", in, got, want)
		}
	}
}
