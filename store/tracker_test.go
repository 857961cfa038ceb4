package store

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTrackerBitsAndEncoding(t *testing.T) {
	tr := newTracker()
	ref := map[uint64][2]bool{} // mod, del
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []uint64{1, 63, 64, 4095, 4096, 4097, 1 << 40, 1<<64 - 1}
	for i := 0; i < 3000; i++ {
		ids = append(ids, uint64(rng.IntN(50000))+1)
	}
	for i, id := range ids {
		st := ref[id]
		if i%3 == 2 {
			tr.delete(id)
			st[1] = true
		} else {
			tr.put(id)
			st[0], st[1] = true, false
		}
		ref[id] = st
	}
	check := func(tr *tracker) {
		t.Helper()
		for id, st := range ref {
			if m, d := tr.state(id); m != st[0] || d != st[1] {
				t.Fatalf("id %d: mod %v del %v, want %v", id, m, d, st)
			}
		}
		if m, d := tr.state(2); m || d {
			t.Fatalf("untouched id 2 has bits")
		}
		var prev uint64
		n := 0
		tr.forEach(func(id uint64, held bool) {
			if n > 0 && id <= prev {
				t.Fatalf("forEach not ascending: %d after %d", id, prev)
			}
			prev = id
			n++
			if st := ref[id]; held != (st[0] && !st[1]) {
				t.Fatalf("forEach id %d held %v, ref %v", id, held, st)
			}
		})
		if n != len(ref) {
			t.Fatalf("forEach visited %d, want %d", n, len(ref))
		}
	}
	check(tr)
	for i := 1; i < len(tr.nodes); i++ {
		if tr.nodes[i-1].base >= tr.nodes[i].base {
			t.Fatal("nodes not sorted")
		}
	}
	enc := tr.encode([]byte{0xAA})
	dec, rest, err := decodeTracker(enc[1:])
	if err != nil || len(rest) != 0 {
		t.Fatalf("decode: %v, %d bytes left", err, len(rest))
	}
	check(dec)
	// Every truncation fails cleanly.
	for i := 0; i < len(enc)-1; i += 7 {
		if _, _, err := decodeTracker(enc[1 : 1+i]); err == nil {
			t.Fatalf("truncated tracker (%d bytes) decoded", i)
		}
	}
	// A dense range of a million ids takes 245 nodes, not one per word.
	big := newTracker()
	for id := uint64(1); id <= 1_000_000; id++ {
		big.put(id)
	}
	if len(big.nodes) != 245 {
		t.Errorf("1M dense ids in %d nodes", len(big.nodes))
	}
}

func TestIDSetHoldingArithmetic(t *testing.T) {
	oldest, newer := newTracker(), newTracker()
	for id := uint64(1); id <= 10000; id++ {
		oldest.put(id)
	}
	for id := uint64(1); id <= 10000; id += 2 {
		newer.put(id) // superseded by a newer image
	}
	for id := uint64(2); id <= 10000; id += 4 {
		newer.delete(id) // superseded by a delete
	}
	oldest.delete(10000) // deleted within the oldest itself
	h := heldSet(oldest)
	if h.len() != 9999 {
		t.Fatalf("held %d", h.len())
	}
	h.subtractTouched(newer)
	var want []uint64
	for id := uint64(4); id < 10000; id += 4 {
		want = append(want, id)
	}
	if got := h.ids(); !slices.Equal(got, want) {
		t.Fatalf("holding has %d ids, want %d (first %v)", len(got), len(want), got[:min(5, len(got))])
	}
	for _, id := range want {
		h.remove(id)
		h.remove(id)
	}
	if h.len() != 0 || len(h.nodes) != 0 {
		t.Fatalf("set not empty: %d ids, %d nodes", h.len(), len(h.nodes))
	}
	h.add(5)
	h.add(5)
	if !h.has(5) || h.has(6) || h.len() != 1 {
		t.Fatal("add/has")
	}
}
