package raftfsm

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
)

// randomProcBatch makes a batch of every shape a payload can take,
// including fields the messages do not know.
func randomProcBatch(r *rand.Rand) []byte {
	bytesOf := func(max int) []byte {
		if r.IntN(4) == 0 {
			return nil
		}
		b := make([]byte, r.IntN(max))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	pb := &raftpb.ProcBatch{FenceTerm: uint64(r.IntN(3))}
	for range r.IntN(5) {
		w := &raftpb.ProcWrite{}
		for range r.IntN(4) {
			w.Inserts = append(w.Inserts, &raftpb.Proc{Id: r.Uint64N(1 << 40), Data: bytesOf(300)})
		}
		for range r.IntN(4) {
			w.Updates = append(w.Updates, &raftpb.Proc{Id: r.Uint64N(1 << 40), Data: bytesOf(300)})
		}
		for range r.IntN(4) {
			w.Deletes = append(w.Deletes, r.Uint64())
		}
		for range r.IntN(4) {
			w.Mutations = append(w.Mutations, &raftpb.Mutation{Op: raftpb.Mutation_Op(r.IntN(4) - 1), Key: bytesOf(40), Value: bytesOf(200)})
		}
		pb.Writes = append(pb.Writes, w)
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		panic(err)
	}
	// Fields a newer version might add, of every wire type, and known
	// numbers of the wrong wire type; deletes unpacked; a field repeated.
	extra := func(b []byte) []byte {
		switch r.IntN(6) {
		case 0:
			b = protowire.AppendTag(b, 9, protowire.VarintType)
			b = protowire.AppendVarint(b, r.Uint64())
		case 1:
			b = protowire.AppendTag(b, 10, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, r.Uint64())
		case 2:
			b = protowire.AppendTag(b, 1, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, r.Uint32())
		case 3:
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, r.Uint64())
		case 4:
			b = protowire.AppendTag(b, 11, protowire.StartGroupType)
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, 5)
			b = protowire.AppendTag(b, 11, protowire.EndGroupType)
		}
		return b
	}
	b = extra(b)
	var w []byte
	w = protowire.AppendTag(w, writeDeletes, protowire.VarintType)
	w = protowire.AppendVarint(w, r.Uint64N(1000)+1)
	w = protowire.AppendTag(w, writeInserts, protowire.BytesType)
	w = protowire.AppendBytes(w, extra(protowire.AppendVarint(protowire.AppendTag(nil, procID, protowire.VarintType), 7)))
	w = protowire.AppendTag(w, writeMutations, protowire.BytesType)
	w = protowire.AppendBytes(w, extra(protowire.AppendBytes(protowire.AppendTag(nil, mutationKey, protowire.BytesType), []byte("k"))))
	w = extra(w)
	b = protowire.AppendTag(b, batchWrites, protowire.BytesType)
	b = protowire.AppendBytes(b, w)
	if r.IntN(2) == 0 {
		b = protowire.AppendTag(b, batchFenceTerm, protowire.VarintType)
		b = protowire.AppendVarint(b, r.Uint64())
	}
	return b
}

// TestUnmarshalProcBatchIsProtoUnmarshal checks the hand-written decoder
// against proto.Unmarshal on random payloads, and on the same payloads
// cut short or with a byte changed: the same message or, for both, an
// error.
func TestUnmarshalProcBatchIsProtoUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(b []byte) {
		t.Helper()
		want := &raftpb.ProcBatch{}
		wantErr := proto.Unmarshal(b, want)
		got, err := unmarshalProcBatch(b)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("payload %x: error %v, proto.Unmarshal's %v", b, err, wantErr)
		case err == nil && !proto.Equal(withoutUnknown(want), got):
			t.Fatalf("payload %x: got %v, want %v", b, got, want)
		}
	}
	for range 3000 {
		b := randomProcBatch(r)
		check(b)
		if len(b) > 0 {
			check(b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			check(c)
		}
	}
}

// withoutUnknown drops the unknown fields proto.Unmarshal keeps and the
// hand-written decoder skips: nothing reads them.
func withoutUnknown(pb *raftpb.ProcBatch) *raftpb.ProcBatch {
	pb.ProtoReflect().SetUnknown(nil)
	for _, w := range pb.Writes {
		w.ProtoReflect().SetUnknown(nil)
		for _, p := range append(append([]*raftpb.Proc(nil), w.Inserts...), w.Updates...) {
			p.ProtoReflect().SetUnknown(nil)
		}
		for _, m := range w.Mutations {
			m.ProtoReflect().SetUnknown(nil)
		}
	}
	return pb
}

// TestUnmarshalProcBatchRefusesFieldNumbersProtoRefuses checks a tag whose
// field number is past protowire.MaxValidNumber (a five-byte tag): proto.Unmarshal,
// which 0.1.0 and every follower not yet upgraded decode with, refuses the
// payload, so the hand-written decoder must too, or the same entry would
// be applied on some masters and refused on others.
func TestUnmarshalProcBatchRefusesFieldNumbersProtoRefuses(t *testing.T) {
	bigTag := func(b []byte) []byte {
		b = protowire.AppendVarint(b, uint64(protowire.MaxValidNumber+1)<<3|uint64(protowire.VarintType))
		return protowire.AppendVarint(b, 1)
	}
	proc := protowire.AppendBytes(protowire.AppendTag(nil, writeInserts, protowire.BytesType),
		bigTag(protowire.AppendVarint(protowire.AppendTag(nil, procID, protowire.VarintType), 7)))
	mut := protowire.AppendBytes(protowire.AppendTag(nil, writeMutations, protowire.BytesType),
		bigTag(protowire.AppendBytes(protowire.AppendTag(nil, mutationKey, protowire.BytesType), []byte("k"))))
	write := func(w []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, batchWrites, protowire.BytesType), w)
	}
	for name, b := range map[string][]byte{
		"batch":    bigTag(nil),
		"write":    write(bigTag(nil)),
		"proc":     write(proc),
		"mutation": write(mut),
	} {
		if err := proto.Unmarshal(b, &raftpb.ProcBatch{}); err == nil {
			t.Fatalf("%s: proto.Unmarshal took payload %x", name, b)
		}
		if pb, err := unmarshalProcBatch(b); err == nil {
			t.Errorf("%s: payload %x decoded as %v, proto.Unmarshal refuses it", name, b, pb)
		}
	}
}
