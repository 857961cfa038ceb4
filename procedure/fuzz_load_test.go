package procedure

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// validRecords is a small tree and a few roots in every framework state, the
// seeds that mutations start from. Their type is noopProc, which finishes
// at once whatever state it decodes, so a mutation can change structure but
// never make a procedure run for long.
func validRecords() []record {
	data := []byte(`{"A":"x","B":7}`)
	return []record{
		{id: 1, root: 1, typeName: "noop", typeVersion: 1, state: Waiting, stack: []int32{0}, data: data, locked: true},
		{id: 2, parent: 1, root: 1, typeName: "noop", typeVersion: 1, state: Runnable, stack: []int32{2}, data: data,
			trace: tracectx.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{id: 3, parent: 1, root: 1, typeName: "noop", typeVersion: 1, state: Success, stack: []int32{1}, data: data},
		{id: 4, root: 4, typeName: "noop", typeVersion: 1, state: WaitingTimeout, waitUntil: 1, data: data, owner: "o", nonce: "n"},
		{id: 5, root: 5, typeName: "noop", typeVersion: 1, state: Failed, stack: []int32{0}, errMsg: "x", data: data},
		{id: 6, root: 6, typeName: "noop", typeVersion: 1, state: Runnable, rollingBack: true, stack: []int32{0, 1}, data: data},
		{id: 7, root: 7, typeName: "noop", typeVersion: 1, state: Success, finishedAt: 5, result: []byte("r"), data: data},
		{id: 8, root: 8, typeName: "sm", typeVersion: 1, state: Runnable, sm: true, smStarted: true, smNext: 1,
			smHistory: []int32{0}, stack: []int32{0}, data: []byte(`{"Name":"m","States":2,"FailAt":-1,"SpawnAt":-1,"ChildFailAt":-1,"NoRollback":-1}`)},
	}
}

func mutate(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	switch rng.IntN(5) {
	case 0: // flip bits
		for i := 0; i < 1+rng.IntN(3) && len(b) > 0; i++ {
			b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
		}
	case 1: // truncate
		if len(b) > 0 {
			b = b[:rng.IntN(len(b))]
		}
	case 2: // overwrite a byte
		if len(b) > 0 {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
	case 3: // splice random bytes in
		i := rng.IntN(len(b) + 1)
		junk := make([]byte, 1+rng.IntN(8))
		for j := range junk {
			junk[j] = byte(rng.IntN(256))
		}
		b = append(b[:i:i], append(junk, b[i:]...)...)
	case 4: // duplicate a slice (repeats fields)
		if len(b) > 1 {
			i := rng.IntN(len(b) - 1)
			j := i + 1 + rng.IntN(len(b)-i-1)
			b = append(b, b[i:j]...)
		}
	}
	return b
}

// TestUnmarshalNeverPanics feeds random and mutated bytes to the record
// decoder.
func TestUnmarshalNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var seeds [][]byte
	for _, r := range validRecords() {
		seeds = append(seeds, r.marshal())
	}
	for i := 0; i < 20000; i++ {
		var b []byte
		if i%3 == 0 {
			b = make([]byte, rng.IntN(64))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
		} else {
			b = seeds[rng.IntN(len(seeds))]
			for k := 0; k <= rng.IntN(4); k++ {
				b = mutate(rng, b)
			}
		}
		var r record
		if err := r.unmarshal(b); err == nil {
			// Whatever decodes must encode and decode to the same record.
			var r2 record
			if err := r2.unmarshal(r.marshal()); err != nil {
				t.Fatalf("re-decoding %x: %v", b, err)
			}
		}
	}
}

// FuzzRecordUnmarshal: `go test -fuzz=FuzzRecordUnmarshal ./procedure/`.
func FuzzRecordUnmarshal(f *testing.F) {
	for _, r := range validRecords() {
		f.Add(r.marshal())
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r record
		if r.unmarshal(b) == nil {
			var r2 record
			if err := r2.unmarshal(r.marshal()); err != nil {
				t.Fatalf("re-decoding: %v", err)
			}
		}
	})
}

// TestLoadGarbage puts random bytes and mutated records into the store
// before Start, next to good procedures: Start must not fail or panic, every
// stored procedure is either loaded or reported (and then kept byte for
// byte), the good ones still run, and Stop returns.
func TestLoadGarbage(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		mem := store.NewMemStore()
		stored := map[uint64][]byte{}
		put := func(id uint64, b []byte) {
			stored[id] = b
			if err := mem.Update(store.Proc{ID: id, Data: b}); err != nil {
				t.Fatal(err)
			}
		}
		// Good procedures, far from the ids and roots mutations produce.
		const good = 1 << 40
		for i := uint64(0); i < 3; i++ {
			r := record{id: good + i, root: good + i, typeName: "noop", typeVersion: 1, state: Runnable, data: []byte(`{}`)}
			put(r.id, r.marshal())
		}
		seeds := validRecords()
		for i := 0; i < 30; i++ {
			id := uint64(1 + rng.IntN(40))
			switch rng.IntN(4) {
			case 0: // random bytes
				b := make([]byte, rng.IntN(48))
				for j := range b {
					b[j] = byte(rng.IntN(256))
				}
				put(id, b)
			case 1: // a valid record, stored under its own id
				r := seeds[rng.IntN(len(seeds))]
				put(r.id, r.marshal())
			default: // a mutated record
				r := seeds[rng.IntN(len(seeds))]
				b := r.marshal()
				for k := 0; k <= rng.IntN(3); k++ {
					b = mutate(rng, b)
				}
				put(r.id, b)
			}
		}
		func() {
			d := newDomain()
			cfg := Config{RecordFormat: version.Newest, Store: mem, Registry: lifecycleRegistry(t), Env: d, Workers: 2,
				RollbackBackoff: time.Millisecond, RollbackBackoffMax: time.Millisecond}
			x, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Start(); err != nil {
				t.Fatalf("seed %d: Start: %v", seed, err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := x.Stop(ctx); err != nil {
					t.Fatalf("seed %d: stop: %v", seed, err)
				}
			}()
			problems := map[uint64]LoadProblem{}
			for _, p := range x.Problems() {
				if p.Reason == "" {
					t.Fatalf("seed %d: problem %d without a reason", seed, p.ID)
				}
				problems[p.ID] = p
			}
			for id, b := range stored {
				p, bad := problems[id]
				_, getErr := x.Get(id)
				switch {
				case bad && !bytes.Equal(p.Raw.Data, b):
					t.Fatalf("seed %d: problem %d reports other bytes than stored", seed, id)
				case bad && getErr == nil:
					t.Fatalf("seed %d: %d is both a problem and loaded", seed, id)
				case !bad && getErr != nil:
					// A child of a finished root is deleted on load; anything
					// else must be loaded or reported.
					var r record
					if r.unmarshal(b) != nil || r.parent == 0 {
						t.Fatalf("seed %d: %d neither loaded nor reported", seed, id)
					}
				}
			}
			for i := uint64(0); i < 3; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				info, err := x.Wait(ctx, good+i)
				cancel()
				if err != nil || info.State != Success {
					t.Fatalf("seed %d: good procedure %d: %v %s", seed, good+i, err, info.State)
				}
			}
			// Reported procedures stay in the store untouched.
			snapshot := map[uint64][]byte{}
			if _, err := mem.Load(func(p store.Proc) error { snapshot[p.ID] = p.Data; return nil }); err != nil {
				t.Fatal(err)
			}
			for id, p := range problems {
				if !bytes.Equal(snapshot[id], p.Raw.Data) {
					t.Fatalf("seed %d: reported procedure %d changed or vanished in the store", seed, id)
				}
			}
		}()
	}
}

// TestLoadParentCycle: two members naming each other as parent pass the
// orphan check, but every walk up the tree (re-acquiring held locks,
// Abort, Bypass) would loop forever. The tree is reported and held.
func TestLoadParentCycle(t *testing.T) {
	mem := store.NewMemStore()
	for _, r := range []record{
		{id: 1, root: 1, typeName: "locked", typeVersion: 1, state: Waiting, data: []byte(`{"ID":"x"}`)},
		{id: 2, parent: 3, root: 1, typeName: "locked", typeVersion: 1, state: Waiting, locked: true, data: []byte(`{"ID":"x"}`)},
		{id: 3, parent: 2, root: 1, typeName: "locked", typeVersion: 1, state: Runnable, locked: true, data: []byte(`{"ID":"x"}`)},
	} {
		if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	h := runBounded(t, "Start", func() *harness { return startExecutor(t, mem, newDomain(), nil) })
	var ids []uint64
	for _, p := range h.x.Problems() {
		ids = append(ids, p.ID)
	}
	if len(ids) != 3 {
		t.Fatalf("problems %v, want the whole tree held", ids)
	}
	if mem.Len() != 3 {
		t.Fatalf("store holds %d", mem.Len())
	}
}
