package domain

import (
	"encoding/json"
	"reflect"
	"testing"
)

// MarshalState writes what json.Marshal writes but for the zero-valued
// fields it leaves out, so that json.Unmarshal (0.1.0's decoding, and
// the console's) reads back the same state.
func TestTransitRegionStateMarshalsAsJSON(t *testing.T) {
	for _, p := range []*TransitRegionState{
		{},
		{Region: "default:t,00001,7", Namespace: "default", Table: "t", Kind: KindAssign, Bounded: true, UndoState: RegionOffline},
		{Region: "ns:t,00002,9", Namespace: "ns", Table: "t", Kind: KindMove, Target: "rs2", From: ServerRef{"rs1", 5},
			Server: ServerRef{"rs3", 1 << 40}, Address: "10.0.0.3:16020", Source: "rs1", Excluded: []string{"rs4", "rs5"},
			Attempts: 2, Rounds: 1, Opened: ServerRef{"rs3", 1 << 40}, Undone: true, Prepared: true},
		{Region: "a\"b\\c<d>&\x01é", Kind: "x\ny", Server: ServerRef{StartCode: 3}},
	} {
		got, err := p.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(got) {
			t.Fatalf("MarshalState(%+v) = %s: not JSON", p, got)
		}
		var back, want TransitRegionState
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		std, _ := json.Marshal(p)
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, want) {
			t.Errorf("MarshalState(%+v) = %s, reads back as %+v; json.Marshal's %s reads back as %+v", p, got, back, std, want)
		}
		if len(got) > len(std) {
			t.Errorf("MarshalState wrote %d bytes, json.Marshal %d", len(got), len(std))
		}
	}
}
