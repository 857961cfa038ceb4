package procedure

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// The edges of the versioned state of a type (TypeOptions.Since,
// StateDowngrader, Context.StateVersion) an independent review probed.

// TestRegisterLargeVersion: Register accepts any version >= 1 (the record
// stores it as a varint), some count by date: the Since levels of the
// versioned state must cost such a type nothing. A first cut made a slice
// of version+1 levels for every type: a version near MaxInt panicked
// (makeslice), a date-style one allocated 4 bytes a version.
func TestRegisterLargeVersion(t *testing.T) {
	f := func() Procedure { return &shapeV1{} }
	for _, v := range []int{1 << 62, math.MaxInt} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Register(version %d) panicked: %v (accepted before 56fb9dd)", v, r)
				}
			}()
			if err := NewRegistry().Register("big", v, f); err != nil {
				t.Fatalf("Register(version %d): %v", v, err)
			}
		})
	}
	t.Run("cost", func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := NewRegistry().Register("big", 1_000_000, f); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Fatalf("Register of an ungated type at version 1e6 allocated %d bytes", n)
		}
	})
}

// rvGated is a gated type (version 2 from format 2) whose rollback leaves
// a state version 1 cannot hold (X >= 100), so DowngradeState fails
// during the rollback.
type rvGated struct {
	StateMachine
	X int
}

func (p *rvGated) InitialState() int32 { return 1 }

func (p *rvGated) ExecuteState(ctx *Context, s int32) (Flow, error) {
	switch s {
	case 1:
		ctx.Env.(*domain).do("rv/1")
		p.X = 1
		p.SetNextState(2)
		return HasMoreState, nil
	}
	return NoMoreState, errors.New("rv step 2 fails")
}

func (p *rvGated) RollbackState(ctx *Context, s int32) error {
	ctx.Env.(*domain).undo(fmt.Sprint("rv/", s))
	p.X = 100 + int(s)
	return nil
}

func (p *rvGated) DowngradeState(to int) ([]byte, error) {
	if p.X >= 100 {
		return nil, errors.New("X does not fit version 1")
	}
	return json.Marshal(struct{ X int }{p.X})
}

func rvMember(t *testing.T, mem store.Store, d *domain, gate version.Gate) *harness {
	t.Helper()
	r := NewRegistry()
	if err := r.RegisterWith("rv", TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format2}},
		func() Procedure { return &rvGated{} }); err != nil {
		t.Fatal(err)
	}
	return startExecutor(t, mem, d, func(c *Config) { c.Registry, c.RecordFormat, c.Workers = r, gate, 1 })
}

// TestShapeDowngradeFailsMidRollback: a DowngradeState failure during
// a rollback does not stop or refail it: the tree ends ROLLEDBACK with the
// step's own error, every rollback ran, and the record stays version 1.
func TestShapeDowngradeFailsMidRollback(t *testing.T) {
	mem, d := store.NewMemStore(), newDomain()
	h := rvMember(t, mem, d, atFormat(version.Format1))
	id := h.submit(&rvGated{}, SubmitOptions{})
	info := h.wait(id)
	if info.State != RolledBack || !strings.Contains(info.Error, "rv step 2 fails") {
		t.Fatalf("ended %s (%q), want ROLLEDBACK for the step's error", info.State, info.Error)
	}
	if d.has("rv/1") {
		t.Fatal("state 1 not rolled back")
	}
	if r := mustRecord(t, mem, id); r.typeVersion != 1 {
		t.Fatalf("stored at version %d below format 2", r.typeVersion)
	}
}

// TestShapeInfoVersionMatchesStored: Info.Version of a live gated
// procedure stored at version 1 (below format 2). The executor's Get
// says the registered version (e.ti.version, api.go infoOfLocked), while
// DecodeInfo/StoredInfos (a standby's stale reads) and Get once it has
// finished (finishedInfoLocked decodes the record) say the version
// stored: one procedure reports two versions depending on who answers.
func TestShapeInfoVersionMatchesStored(t *testing.T) {
	mem, d := store.NewMemStore(), newDomain()
	h := shapeMember(t, mem, d, 2, shApply, atFormat(version.Format1), nil)
	id := h.submit(shapeProc(2, "i", shApply), SubmitOptions{})
	parked(t, h, mem, id, shApply)
	live, err := h.x.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := DecodeInfo(stored(t, mem, id))
	if err != nil {
		t.Fatal(err)
	}
	if live.Version != st.Version {
		t.Fatalf("Get says version %d, DecodeInfo of its record says %d", live.Version, st.Version)
	}
}

// rsParent is a gated parent that spawns a gated child (shapeV2, parked
// in apply) in its first state.
type rsParent struct {
	StateMachine
	N int
}

func (p *rsParent) InitialState() int32 { return 1 }

func (p *rsParent) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == 1 {
		p.N = ctx.StateVersion()
		ctx.AddChild(&shapeV2{Name: "kid", park: shApply})
		p.SetNextState(2)
		return HasMoreState, nil
	}
	return NoMoreState, nil
}

func (p *rsParent) RollbackState(ctx *Context, s int32) error { return nil }

func (p *rsParent) DowngradeState(to int) ([]byte, error) { return json.Marshal(struct{ N int }{p.N}) }

// TestShapeGatedChild: a gated child of a gated parent below format 2 is
// stored at version 1 from its first write, runs the version 1 path, and
// moves to version 2 at its first write after the raise, its parent too.
func TestShapeGatedChild(t *testing.T) {
	var f atomic.Uint32
	f.Store(uint32(version.Format1))
	gate := func() version.Format { return version.Format(f.Load()) }
	r := NewRegistry()
	if err := r.RegisterWith("rvp", shapeSince, func() Procedure { return &rsParent{} }); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterWith("shape", shapeSince, func() Procedure { return &shapeV2{park: shApply} }); err != nil {
		t.Fatal(err)
	}
	mem, d := store.NewMemStore(), newDomain()
	h := startExecutor(t, mem, d, func(c *Config) { c.Registry, c.RecordFormat, c.Workers = r, gate, 1 })
	id := h.submit(&rsParent{}, SubmitOptions{})
	var kid uint64
	testwait.For(t, 10*time.Second, "the child parked", func() bool {
		info, err := h.x.Get(id)
		if err != nil || len(info.Children) != 1 {
			return false
		}
		kid = info.Children[0]
		k, err := h.x.Get(kid)
		return err == nil && k.State == Waiting
	})
	for _, pid := range []uint64{id, kid} {
		if rec := mustRecord(t, mem, pid); rec.typeVersion != 1 {
			t.Fatalf("proc %d stored at version %d below format 2", pid, rec.typeVersion)
		}
	}
	if d.has("kid/verify") {
		t.Fatal("the child ran verify, told version 1")
	}
	f.Store(uint32(version.Format2))
	if err := h.x.Pause(kid); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the child's pause written at version 2", func() bool {
		rec := mustRecord(t, mem, kid)
		return rec.paused && rec.typeVersion == 2
	})
}
