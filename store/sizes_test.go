package store

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// sizeMap behaves as a map[uint64]uint32 under random sets and removes,
// dense and sparse, and frees the blocks it empties.
func TestSizeMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m, model := newSizeMap(), map[uint64]uint32{}
	for step := range 200_000 {
		var id uint64
		switch rng.IntN(3) {
		case 0: // dense run
			id = uint64(rng.IntN(2000))
		case 1: // sparse, across block boundaries
			id = uint64(rng.IntN(1000)) * 977
		default: // the top of the id space, as raftfsm's key images use
			id = ^uint64(0) - uint64(rng.IntN(300))
		}
		if rng.IntN(100) < 55-step/10_000 { // grow, then shrink to empty
			size := uint32(rng.IntN(1 << 20))
			if old := m.set(id, size); old != model[id] {
				t.Fatalf("step %d: set(%d) replaced %d, want %d", step, id, old, model[id])
			}
			model[id] = size
		} else {
			size, ok := m.remove(id)
			want, wantOK := model[id]
			if size != want || ok != wantOK {
				t.Fatalf("step %d: remove(%d) = %d %v, want %d %v", step, id, size, ok, want, wantOK)
			}
			delete(model, id)
		}
		if m.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, m.len(), len(model))
		}
	}
	for id, size := range model {
		if got, ok := m.remove(id); !ok || got != size {
			t.Fatalf("remove(%d) = %d %v, want %d", id, got, ok, size)
		}
	}
	if m.len() != 0 || len(m.blocks) != 0 {
		t.Fatalf("emptied map holds %d ids in %d blocks", m.len(), len(m.blocks))
	}
}

// A dense run of ids costs a few bytes each (a map[uint64]uint32 costs
// 20 to 40).
func TestSizeMapDenseFootprint(t *testing.T) {
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newSizeMap()
	for id := uint64(1 << 63); id < 1<<63+n; id++ {
		m.set(id, 100)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if perID := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n; perID > 12 {
		t.Errorf("%.1f bytes per dense id, want at most 12", perID)
	} else {
		t.Logf("%.1f bytes per dense id", perID)
	}
	runtime.KeepAlive(m)
}
