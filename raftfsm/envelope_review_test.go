package raftfsm

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

func randomWrites(rng *rand.Rand) []Write {
	data := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		b := make([]byte, rng.IntN([]int{8, 200, 70000}[rng.IntN(3)]))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	id := func() uint64 { return []uint64{1, 127, 128, 1 << 40, rng.Uint64N(1 << 62)}[rng.IntN(5)] }
	procs := func() []store.Proc {
		var ps []store.Proc
		for range rng.IntN(4) {
			ps = append(ps, store.Proc{ID: id(), Data: data()})
		}
		return ps
	}
	ws := make([]Write, rng.IntN(4))
	for i := range ws {
		ws[i] = Write{Inserts: procs(), Updates: procs()}
		for range rng.IntN(3) {
			ws[i].Deletes = append(ws[i].Deletes, id())
		}
		for range rng.IntN(4) {
			k := fmt.Sprintf("k/%d\x00é", rng.IntN(1000))
			if rng.IntN(3) == 0 {
				ws[i].Mutations = append(ws[i].Mutations, Del(k))
			} else {
				ws[i].Mutations = append(ws[i].Mutations, Put(k, data()))
			}
		}
	}
	return ws
}

// EncodeFencedProcBatch writes, for random batches, the bytes the
// release's encoding (the batch marshalled, then framed by
// EncodeCommand) wrote, and decodeEnvelope reads them back as
// proto.Unmarshal does.
func TestProcBatchEncodingUnchangedOnRandomBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 3))
	for i := range 500 {
		ws := randomWrites(rng)
		term := []uint64{0, 1, math.MaxUint64, rng.Uint64()}[rng.IntN(4)]
		got, err := EncodeFencedProcBatch(term, ws...)
		if err != nil {
			t.Fatal(err)
		}
		want, payload := releaseProcBatch(t, term, ws)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d: %d writes, term %d: the encoding changed", i, len(ws), term)
		}
		env, err := decodeEnvelope(got)
		if err != nil {
			t.Fatal(err)
		}
		if env.Type != raftpb.CommandType_COMMAND_TYPE_PROC_BATCH || env.IgnoreIfUnknown || !bytes.Equal(env.Payload, payload) {
			t.Fatalf("%d: decoded %v", i, env)
		}
	}
}

// A corrupt entry (a real batch truncated anywhere, bytes flipped, an
// envelope of random fields) is refused with an error, as proto.Unmarshal
// refuses it, and never panics the FSM; a good entry applied after them
// still applies.
func TestCorruptEntriesAreRefusedNotPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 4))
	f := newTestFSM(t, t.TempDir())
	var good [][]byte
	for range 20 {
		b, err := EncodeFencedProcBatch(0, randomWrites(rng)...)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 4000 {
			good = append(good, b)
		}
	}
	var bad [][]byte
	for _, b := range good {
		for n := range len(b) {
			bad = append(bad, b[:n])
		}
		for range 200 {
			c := bytes.Clone(b)
			for range 1 + rng.IntN(3) {
				c[rng.IntN(len(c))] ^= byte(1 + rng.IntN(255))
			}
			bad = append(bad, c)
		}
	}
	// Envelopes built of random well-formed and ill-formed fields.
	for range 5000 {
		e := []byte{magic0, magic1, formatVersion}
		for range rng.IntN(5) {
			num := []protowire.Number{1, 2, 3, 4, 1 << 20, protowire.MaxValidNumber}[rng.IntN(6)]
			typ := []protowire.Type{protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType,
				protowire.StartGroupType, protowire.EndGroupType}[rng.IntN(6)]
			e = protowire.AppendTag(e, num, typ)
			switch typ {
			case protowire.VarintType:
				e = protowire.AppendVarint(e, []uint64{0, 1, 2, math.MaxUint32, math.MaxUint64}[rng.IntN(5)])
			case protowire.Fixed32Type:
				e = protowire.AppendFixed32(e, rng.Uint32())
			case protowire.Fixed64Type:
				e = protowire.AppendFixed64(e, rng.Uint64())
			case protowire.BytesType:
				p := good[rng.IntN(len(good))][prefixLen:]
				e = protowire.AppendBytes(e, p[:rng.IntN(len(p)+1)])
			case protowire.StartGroupType:
				if rng.IntN(2) == 0 {
					e = protowire.AppendTag(e, num, protowire.EndGroupType)
				}
			}
		}
		if rng.IntN(4) == 0 && len(e) > prefixLen {
			e = e[:prefixLen+rng.IntN(len(e)-prefixLen)]
		}
		bad = append(bad, e)
	}
	logs := make([]*raft.Log, 0, len(bad)+1)
	for i, b := range bad {
		env, gerr := decodeEnvelope(b)
		want := &raftpb.Envelope{}
		werr := proto.Unmarshal(b[min(len(b), prefixLen):], want)
		if len(b) >= prefixLen && b[0] == magic0 && b[1] == magic1 && b[2] == formatVersion {
			if (gerr != nil) != (werr != nil) {
				t.Fatalf("% x: decodeEnvelope error %v, proto.Unmarshal's %v", b, gerr, werr)
			}
			if gerr == nil && (env.Type != want.Type || env.IgnoreIfUnknown != want.IgnoreIfUnknown || !bytes.Equal(env.Payload, want.Payload)) {
				t.Fatalf("% x: decodeEnvelope %v, proto.Unmarshal %v", b, env, want)
			}
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: b})
	}
	last, err := EncodeProcBatch(Write{Updates: []store.Proc{{ID: 7, Data: []byte("after")}}})
	if err != nil {
		t.Fatal(err)
	}
	logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: last})
	f.ApplyBatch(logs) // must not panic; some flipped bytes still decode
	if d, ok := f.Proc(7); !ok || string(d) != "after" {
		t.Fatalf("proc 7 after the corrupt entries: %q %v", d, ok)
	}
}

// What the FSM keeps of an entry is its own: raft (and bolt, and the
// transport) may reuse an entry's buffer once Apply returns, and the
// envelope's payload aliases it, so nothing kept may point into it.
func TestAppliedStateDoesNotAliasTheEntry(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	data, err := EncodeProcBatch(Write{
		Inserts:   []store.Proc{{ID: 1, Data: []byte("proc one")}},
		Updates:   []store.Proc{{ID: 2, Data: bytes.Repeat([]byte("p2"), 300)}},
		Mutations: []Mutation{Put("key", []byte("value"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}})
	for i := range data {
		data[i] = 0xAA
	}
	if d, _ := f.Proc(1); string(d) != "proc one" {
		t.Errorf("proc 1 is %q after the entry's buffer was reused", d)
	}
	if d, _ := f.Proc(2); !bytes.Equal(d, bytes.Repeat([]byte("p2"), 300)) {
		t.Errorf("proc 2 changed after the entry's buffer was reused")
	}
	if v, _ := f.Get("key"); string(v) != "value" {
		t.Errorf("key is %q after the entry's buffer was reused", v)
	}
}

// TestEnvelopeRefusesFieldNumbersProtoRefuses: a tag whose field number is
// past protowire.MaxValidNumber makes proto.Unmarshal, 0.1.0's envelope
// decoder, refuse the entry; the hand-written one must refuse it too, or
// masters of the two versions would disagree on applying it.
func TestEnvelopeRefusesFieldNumbersProtoRefuses(t *testing.T) {
	data, err := EncodeProcBatch(Write{Mutations: []Mutation{Put("k", []byte("v"))}})
	if err != nil {
		t.Fatal(err)
	}
	data = protowire.AppendVarint(data, uint64(protowire.MaxValidNumber+1)<<3|uint64(protowire.VarintType))
	data = protowire.AppendVarint(data, 1)
	if err := proto.Unmarshal(data[prefixLen:], &raftpb.Envelope{}); err == nil {
		t.Fatalf("proto.Unmarshal took envelope %x", data)
	}
	if env, err := decodeEnvelope(data); err == nil {
		t.Errorf("envelope %x decoded as %v, proto.Unmarshal refuses it", data, env)
	}
}
