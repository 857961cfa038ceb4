package procedure

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/store"
)

// TestBadTraceFieldNeverLosesAProcedure: a record whose persisted trace
// context (field 110) is missing, short, all zeros, or of the wrong wire
// type still loads and runs: a bad trace context is ignored, never a load
// problem.
func TestBadTraceFieldNeverLosesAProcedure(t *testing.T) {
	mem := store.NewMemStore()
	data := []byte(`{"Name":"g","Steps":1,"FailAt":-1,"SpawnAt":-1,"SuspendAt":-1,"ChildFailAt":-1}`)
	tails := map[string][]byte{
		"absent (an old record)": nil,
		"short":                  protowire.AppendBytes(protowire.AppendTag(nil, fTrace, protowire.BytesType), []byte{1, 2, 3}),
		"zero ids":               protowire.AppendBytes(protowire.AppendTag(nil, fTrace, protowire.BytesType), make([]byte, 25)),
		"long":                   protowire.AppendBytes(protowire.AppendTag(nil, fTrace, protowire.BytesType), make([]byte, 55)),
		"varint":                 protowire.AppendVarint(protowire.AppendTag(nil, fTrace, protowire.VarintType), 7),
		"fixed64":                protowire.AppendFixed64(protowire.AppendTag(nil, fTrace, protowire.Fixed64Type), 7),
	}
	var ids []uint64
	id := uint64(0)
	for name, tail := range tails {
		id++
		r := record{id: id, root: id, typeName: "steps", typeVersion: 1, state: Runnable, data: data}
		b := append(r.marshal(), tail...)
		if _, err := DecodeInfo(b); err != nil {
			t.Errorf("%s: DecodeInfo: %v", name, err)
		}
		if _, err := DecodeSummary(b); err != nil {
			t.Errorf("%s: DecodeSummary: %v", name, err)
		}
		if err := mem.Update(store.Proc{ID: id, Data: b}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	h := startExecutor(t, mem, newDomain(), nil)
	if ps := h.x.Problems(); len(ps) != 0 {
		t.Fatalf("load problems: %+v", ps)
	}
	for _, id := range ids {
		if info := h.wait(id); info.State != Success {
			t.Errorf("procedure %d: %s", id, info.State)
		}
	}
}
