package domain

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// trs010 is TransitRegionState's state as release 0.1.0 declares it
// (fa4612c, cluster/domain/trsp.go): what a 0.1.0 master decodes a
// record into after a failover in a mixed cluster.
type trs010 struct {
	Region    string       `json:"region"`
	Namespace string       `json:"namespace"`
	Table     string       `json:"table"`
	Kind      string       `json:"kind"`
	Target    string       `json:"target,omitempty"`
	From      serverRef010 `json:"from"`
	Bounded   bool         `json:"bounded,omitempty"`
	UndoState string       `json:"undo_state,omitempty"`
	Server    serverRef010 `json:"server"`
	Address   string       `json:"address,omitempty"`
	Source    string       `json:"source,omitempty"`
	Excluded  []string     `json:"excluded,omitempty"`
	Attempts  int          `json:"attempts,omitempty"`
	Rounds    int          `json:"rounds,omitempty"`
	Opened    serverRef010 `json:"opened"`
	Undone    bool         `json:"undone,omitempty"`
	Prepared  bool         `json:"prepared,omitempty"`
}

type serverRef010 struct {
	ID        string `json:"id"`
	StartCode uint64 `json:"start_code"`
}

// MarshalState, decoded by 0.1.0's decoder (encoding/json into 0.1.0's
// struct), reads back exactly what json.Marshal's encoding does, and
// what the current decoder reads back, for random states: names with
// quotes, backslashes, HTML characters, control characters, U+2028,
// non-ASCII and invalid UTF-8, zero and extreme numbers, nil, empty and
// filled lists.
func TestTransitRegionStateMarshalStateDecodesAs010(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 1))
	alphabet := []string{"a", "Z", "0", ":", ",", " ", "\"", "\\", "/", "<", ">", "&", "\x00", "\x01", "\n", "\t", "\x1f",
		"\x7f", "é", "日本", "\u2028", "\u2029", "\U0001F600", "\xff", "\xc3", "\ufffd", "\\u0041", "{", "}", "[", "]"}
	str := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		n := rng.IntN(12)
		s := ""
		for range n {
			s += alphabet[rng.IntN(len(alphabet))]
		}
		return s
	}
	num := func() int {
		switch rng.IntN(5) {
		case 0:
			return 0
		case 1:
			return math.MaxInt64
		case 2:
			return math.MinInt64
		}
		return rng.IntN(2000) - 1000
	}
	ref := func() ServerRef {
		switch rng.IntN(4) {
		case 0:
			return ServerRef{}
		case 1:
			return ServerRef{StartCode: rng.Uint64()}
		case 2:
			return ServerRef{ID: str()}
		}
		return ServerRef{ID: str(), StartCode: []uint64{0, 1, math.MaxUint64, rng.Uint64()}[rng.IntN(4)]}
	}
	for i := range 20000 {
		p := &TransitRegionState{Region: str(), Namespace: str(), Table: str(), Kind: str(), Target: str(), From: ref(),
			Bounded: rng.IntN(2) == 0, UndoState: str(), Server: ref(), Address: str(), Source: str(),
			Attempts: num(), Rounds: num(), Opened: ref(), Undone: rng.IntN(2) == 0, Prepared: rng.IntN(2) == 0}
		switch rng.IntN(3) {
		case 1:
			p.Excluded = []string{}
		case 2:
			for range 1 + rng.IntN(3) {
				p.Excluded = append(p.Excluded, str())
			}
		}
		got, err := p.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		std, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var old, want trs010
		if err := json.Unmarshal(got, &old); err != nil {
			t.Fatalf("%d: 0.1.0 cannot decode MarshalState's %q: %v", i, got, err)
		}
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(old, want) {
			t.Fatalf("%d: MarshalState %s reads back in 0.1.0 as\n%+v\njson.Marshal's %s as\n%+v", i, got, old, std, want)
		}
		var cur, curStd TransitRegionState
		if err := json.Unmarshal(got, &cur); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(std, &curStd); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cur, curStd) {
			t.Fatalf("%d: MarshalState %s reads back as %+v, json.Marshal's as %+v", i, got, cur, curStd)
		}
	}
}
