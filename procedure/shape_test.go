package procedure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Issue 30, item 4: a procedure type whose state changes shape between two
// builds, each build a registry of its own (two binaries), each with its
// executor over one store; stopping one executor and starting the other's
// is a failover between members of two releases.
//
// Build 1 registers "shape" at version 1: states prepare → apply → finish,
// state {Name, Count}. Build 2 registers it at version 2, introduced by
// format 2: Count renamed Total (its StateUpgrader maps the old name), a
// field Checked added, and a state verify inserted between prepare and
// apply, which it enters only when its state is written at version 2.
const (
	shPrepare int32 = 1
	shApply   int32 = 2
	shFinish  int32 = 3
	shVerify  int32 = 4 // version 2 only
)

// shapeState1 is version 1's state, as build 1 writes it.
type shapeState1 struct {
	Name  string
	Count int
}

type shapeV1 struct {
	StateMachine
	Name  string
	Count int
	park  int32 // a state the step suspends in, on an event never fired
}

func (p *shapeV1) InitialState() int32 { return shPrepare }

func (p *shapeV1) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == shPrepare && s != p.park {
		ctx.Env.(*domain).do(p.Name + "/prepare")
		p.Count = 1
		p.SetNextState(shApply)
		return HasMoreState, nil
	}
	return shapeStep(ctx, &p.StateMachine, p.park, p.Name, &p.Count, s)
}

// shapeStep runs what both builds do alike: park, and the states apply
// and finish (total is Count, or Total).
func shapeStep(ctx *Context, m *StateMachine, park int32, name string, total *int, s int32) (Flow, error) {
	if s == park {
		ctx.Suspend(OnEvent(scheduler.NewEvent("park")))
		return HasMoreState, nil
	}
	switch s {
	case shApply:
		ctx.Env.(*domain).do(name + "/apply")
		*total += 10
		m.SetNextState(shFinish)
		return HasMoreState, nil
	case shFinish:
		ctx.Env.(*domain).do(name + "/finish")
		*total += 100
		ctx.SetResult(fmt.Appendf(nil, "%s total=%d", name, *total))
		return NoMoreState, nil
	}
	return NoMoreState, fmt.Errorf("shape: no state %d", s)
}

func (p *shapeV1) RollbackState(ctx *Context, s int32) error { return nil }

type shapeV2 struct {
	StateMachine
	Name    string
	Total   int
	Checked bool
	park    int32
	// downgradeErr, when set, is what DowngradeState fails with once
	// Total reaches failFrom.
	downgradeErr error
	failFrom     int
}

func (p *shapeV2) InitialState() int32 { return shPrepare }

func (p *shapeV2) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == p.park {
		return shapeStep(ctx, &p.StateMachine, p.park, p.Name, &p.Total, s)
	}
	switch s {
	case shPrepare:
		ctx.Env.(*domain).do(p.Name + "/prepare")
		p.Total = 1
		if ctx.StateVersion() >= 2 {
			p.SetNextState(shVerify)
		} else {
			// Version 1 has no verify: a build 1 member may load what this
			// write stores.
			p.SetNextState(shApply)
		}
	case shVerify:
		ctx.Env.(*domain).do(p.Name + "/verify")
		p.Checked = true
		p.SetNextState(shApply)
	default:
		return shapeStep(ctx, &p.StateMachine, p.park, p.Name, &p.Total, s)
	}
	return HasMoreState, nil
}

func (p *shapeV2) RollbackState(ctx *Context, s int32) error { return nil }

func (p *shapeV2) UpgradeState(from int, decode func(old any) error) error {
	var v1 shapeState1
	if err := decode(&v1); err != nil {
		return err
	}
	p.Name, p.Total = v1.Name, v1.Count
	return nil
}

func (p *shapeV2) DowngradeState(to int) ([]byte, error) {
	if p.downgradeErr != nil && p.Total >= p.failFrom {
		return nil, p.downgradeErr
	}
	if to != 1 {
		return nil, fmt.Errorf("shape: no version %d", to)
	}
	return json.Marshal(shapeState1{Name: p.Name, Count: p.Total})
}

// shapeSince is build 2's registration: version 2 from format 2.
var shapeSince = TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format2}}

// shapeBuild is the registry of build 1 or 2; its procedures park in
// state park (0: none).
func shapeBuild(t testing.TB, build int, park int32) *Registry {
	t.Helper()
	r := NewRegistry()
	var err error
	if build == 1 {
		err = r.Register("shape", 1, func() Procedure { return &shapeV1{park: park} })
	} else {
		err = r.RegisterWith("shape", shapeSince, func() Procedure { return &shapeV2{park: park} })
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// shapeMember starts an executor of build on st, its records written at
// the cluster version gate reads.
func shapeMember(t testing.TB, st store.Store, d *domain, build int, park int32, gate version.Gate, clk clock.Clock) *harness {
	t.Helper()
	return startExecutor(t, st, d, func(c *Config) {
		c.Registry, c.RecordFormat, c.Workers, c.Node = shapeBuild(t, build, park), gate, 1, fmt.Sprint("build", build)
		if clk != nil {
			c.Clock, c.Node = clk, "m1"
		}
	})
}

func shapeProc(build int, name string, park int32) Procedure {
	if build == 1 {
		return &shapeV1{Name: name, park: park}
	}
	return &shapeV2{Name: name, park: park}
}

func atFormat(f version.Format) version.Gate { return func() version.Format { return f } }

// parked waits until procedure id is stored WAITING in its park state,
// and returns its record as stored. The executor shows a suspended
// procedure WAITING before its suspension is written, so the wait is on
// the store as well as on Get.
func parked(t *testing.T, h *harness, mem *store.MemStore, id uint64, state int32) record {
	t.Helper()
	testwait.For(t, 10*time.Second, "the procedure parked and stored so", func() bool {
		info, err := h.x.Get(id)
		if err != nil || info.State != Waiting {
			return false
		}
		data, ok := storedData(t, mem, id)
		var r record
		return ok && r.unmarshal(data) == nil && r.state == Waiting
	})
	r := mustRecord(t, mem, id)
	if r.state != Waiting || r.smNext != state {
		t.Fatalf("stored %s at state %d, want WAITING at %d", r.state, r.smNext, state)
	}
	return r
}

// failover stops h, as its member goes down.
func failover(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// finished checks that id ended SUCCESS on h with result want, having had
// exactly the effects wantFx.
func finished(t *testing.T, h *harness, id uint64, want string, wantFx ...string) {
	t.Helper()
	if p := h.x.Problems(); len(p) > 0 {
		t.Fatalf("load problems: %+v", p)
	}
	info := h.wait(id)
	if info.State != Success || string(info.Result) != want {
		t.Fatalf("ended %s with %q (%s), want SUCCESS with %q", info.State, info.Result, info.Error, want)
	}
	got := h.d.effectsUnder("")
	slices.Sort(got)
	slices.Sort(wantFx)
	if !slices.Equal(got, wantFx) {
		t.Fatalf("effects %v, want %v", got, wantFx)
	}
}

// TestShapeOldBuildToNew: an instance build 1 wrote is finished by build 2
// after a failover, its Count read as Total, and build 2's inserted state
// run on the way: build 1 stored it in prepare (the state it runs again).
func TestShapeOldBuildToNew(t *testing.T) {
	for _, f := range []version.Format{version.Format1, version.Format2} {
		t.Run(f.String(), func(t *testing.T) {
			mem, d := store.NewMemStore(), newDomain()
			old := shapeMember(t, mem, d, 1, shApply, atFormat(f), nil)
			id := old.submit(shapeProc(1, "a", shApply), SubmitOptions{})
			if r := parked(t, old, mem, id, shApply); r.typeVersion != 1 || string(r.data) != `{"Name":"a","Count":1}` {
				t.Fatalf("build 1 stored version %d, %s", r.typeVersion, r.data)
			}
			failover(t, old)
			// Build 2 resumes at apply: verify comes before it, so it does
			// not run; Count (1) goes on as Total.
			finished(t, shapeMember(t, mem, d, 2, 0, atFormat(f), nil), id, "a total=111", "a/prepare", "a/apply", "a/finish")

			// Stored before its state machine reached apply, build 1's
			// instance goes through build 2's verify at format 2 only.
			mem, d = store.NewMemStore(), newDomain()
			old = shapeMember(t, mem, d, 1, shPrepare, atFormat(f), nil)
			id = old.submit(shapeProc(1, "b", shPrepare), SubmitOptions{})
			parked(t, old, mem, id, shPrepare)
			failover(t, old)
			fx := []string{"b/prepare", "b/apply", "b/finish"}
			if f >= version.Format2 {
				fx = append(fx, "b/verify")
			}
			finished(t, shapeMember(t, mem, d, 2, 0, atFormat(f), nil), id, "b total=111", fx...)
		})
	}
}

// TestShapeNewBuildAtOldFormatToOld: build 2 below format 2 writes its
// instance at version 1, the record byte for byte what build 1 writes at
// the same point (same clock, member and id), and skips its inserted
// state; after a failover back, build 1 loads it (not held, not "newer
// binary") and finishes it.
func TestShapeNewBuildAtOldFormatToOld(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	run := func(build int) (*store.MemStore, *domain, uint64, record) {
		mem, d := store.NewMemStore(), newDomain()
		h := shapeMember(t, mem, d, build, shApply, atFormat(version.Format1), clock.NewManual(start))
		id := h.submit(shapeProc(build, "c", shApply), SubmitOptions{Owner: "o", Nonce: "n"})
		r := parked(t, h, mem, id, shApply)
		failover(t, h)
		return mem, d, id, r
	}
	oldMem, _, oldID, _ := run(1)
	mem, d, id, r := run(2)
	if r.typeVersion != 1 || string(r.data) != `{"Name":"c","Count":1}` || !slices.Equal(r.smHistory, []int32{shPrepare, shApply}) {
		t.Fatalf("build 2 at format 1 stored version %d, %s, history %v; want version 1's shape and states", r.typeVersion, r.data, r.smHistory)
	}
	if a, b := stored(t, oldMem, oldID), stored(t, mem, id); oldID != id || !bytes.Equal(a, b) {
		t.Fatalf("build 2's record at format 1 differs from build 1's:\n%x\n%x", b, a)
	}
	if _, _, err := shapeBuild(t, 1, 0).DecodeState(stored(t, mem, id)); err != nil {
		t.Fatalf("build 1 decodes it: %v", err)
	}
	finished(t, shapeMember(t, mem, d, 1, 0, atFormat(version.Format1), nil), id, "c total=111", "c/prepare", "c/apply", "c/finish")
}

// TestShapeNewBuildAtNewFormatRefusedByOld: build 2 at format 2 writes
// version 2 (verify run, Total and Checked stored); build 1 refuses to
// load it, as written by a newer binary, and keeps it untouched: the
// reason the cluster version is never lowered. Build 2 then finishes it.
func TestShapeNewBuildAtNewFormatRefusedByOld(t *testing.T) {
	mem, d := store.NewMemStore(), newDomain()
	h := shapeMember(t, mem, d, 2, shApply, atFormat(version.Format2), nil)
	id := h.submit(shapeProc(2, "e", shApply), SubmitOptions{Nonce: "n"})
	r := parked(t, h, mem, id, shApply)
	if r.typeVersion != 2 || string(r.data) != `{"Name":"e","Total":1,"Checked":true}` || !slices.Equal(r.smHistory, []int32{shPrepare, shVerify, shApply}) {
		t.Fatalf("build 2 at format 2 stored version %d, %s, history %v", r.typeVersion, r.data, r.smHistory)
	}
	failover(t, h)
	before := stored(t, mem, id)

	if _, _, err := shapeBuild(t, 1, 0).DecodeState(before); !errors.Is(err, ErrUnknownType) || !strings.Contains(err.Error(), "written by a newer binary") {
		t.Fatalf("build 1 decodes version 2: %v, want ErrUnknownType, written by a newer binary", err)
	}
	old := shapeMember(t, mem, d, 1, 0, atFormat(version.Format2), nil)
	probs := old.x.Problems()
	if len(probs) != 1 || probs[0].ID != id || !strings.Contains(probs[0].Reason, "written by a newer binary") {
		t.Fatalf("build 1's load problems %+v, want procedure %d written by a newer binary", probs, id)
	}
	if _, err := old.x.Get(id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("build 1 Get: %v, want the procedure not loaded", err)
	}
	// A retry of its submission is told it is held, not given another.
	if got, err := old.x.Submit(shapeProc(1, "e", 0), SubmitOptions{Nonce: "n"}); got != id || !errors.Is(err, ErrHeld) {
		t.Fatalf("resubmitted on build 1: %d, %v; want %d held", got, err, id)
	}
	failover(t, old)
	if !bytes.Equal(stored(t, mem, id), before) {
		t.Fatal("build 1 changed the record it could not load")
	}
	finished(t, shapeMember(t, mem, d, 2, 0, atFormat(version.Format2), nil), id, "e total=111", "e/prepare", "e/verify", "e/apply", "e/finish")
}

// TestShapeVersionNeverLowered: a procedure written at version 2 stays at
// version 2 when a member whose gate reads format 1 (a corrupt cluster
// version counts as 1) resumes it, for its history already holds verify,
// which version 1 cannot express; and one at version 1 moves to 2 at the
// first write after the raise.
func TestShapeVersionNeverLowered(t *testing.T) {
	mem, d := store.NewMemStore(), newDomain()
	h := shapeMember(t, mem, d, 2, shApply, atFormat(version.Format2), nil)
	id := h.submit(shapeProc(2, "g", shApply), SubmitOptions{})
	parked(t, h, mem, id, shApply)
	failover(t, h)
	h = shapeMember(t, mem, d, 2, 0, atFormat(version.Format1), nil)
	finished(t, h, id, "g total=111", "g/prepare", "g/verify", "g/apply", "g/finish")
	if r := mustRecord(t, mem, id); r.typeVersion != 2 {
		t.Fatalf("finished at version %d after a gate reading format 1, want 2", r.typeVersion)
	}

	var f atomic.Uint32
	f.Store(uint32(version.Format1))
	mem, d = store.NewMemStore(), newDomain()
	h = shapeMember(t, mem, d, 2, shApply, func() version.Format { return version.Format(f.Load()) }, nil)
	id = h.submit(shapeProc(2, "k", shApply), SubmitOptions{})
	if r := parked(t, h, mem, id, shApply); r.typeVersion != 1 {
		t.Fatalf("stored at version %d at format 1", r.typeVersion)
	}
	f.Store(uint32(version.Format2))
	if err := h.x.Pause(id); err != nil { // a write of the parked procedure
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the pause written at version 2", func() bool {
		r := mustRecord(t, mem, id)
		return r.paused && r.typeVersion == 2 && string(r.data) == `{"Name":"k","Total":1,"Checked":false}`
	})
}

// mustRecord is procedure id's stored record; the test fails without one.
func mustRecord(t *testing.T, st store.Store, id uint64) record {
	t.Helper()
	var r record
	if err := r.unmarshal(stored(t, st, id)); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestShapeCrashAtEveryWriteThenOldBuild: build 2 below format 2 crashes
// after each of its store writes in turn; build 1 then takes over the
// store, loads what it left and finishes it (a client retrying its
// submission with the nonce if the crash came before it was
// acknowledged): it ends SUCCESS once, with build 1's effects and result.
func TestShapeCrashAtEveryWriteThenOldBuild(t *testing.T) {
	clean := &crashStore{inner: store.NewMemStore(), budget: -1}
	h := shapeMember(t, clean, newDomain(), 2, 0, atFormat(version.Format1), nil)
	finished(t, h, h.submit(shapeProc(2, "s", 0), SubmitOptions{Nonce: "s"}), "s total=111", "s/prepare", "s/apply", "s/finish")
	failover(t, h)
	total := clean.writes
	if total < 4 {
		t.Fatalf("a clean run made %d writes", total)
	}
	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			mem, d := store.NewMemStore(), newDomain()
			cs := &crashStore{inner: mem, budget: n}
			x1 := shapeMember(t, cs, d, 2, 0, atFormat(version.Format1), nil)
			acked := map[string]uint64{}
			if id, err := x1.x.Submit(shapeProc(2, "s", 0), SubmitOptions{Nonce: "s"}); err == nil {
				acked["s"] = id
			}
			x1.waitCrashOrEnd(acked)
			failover(t, x1)
			if id, ok := acked["s"]; ok {
				if r := mustRecord(t, mem, id); r.typeVersion != 1 {
					t.Fatalf("build 2 at format 1 stored version %d", r.typeVersion)
				}
			}
			cs2 := &crashStore{inner: mem, budget: -1}
			cs2.seedFrom(&cs.endCounts)
			x2 := shapeMember(t, cs2, d, 1, 0, atFormat(version.Format1), nil)
			id := x2.resubmitAfterCrash(shapeProc(1, "s", 0), "s", cs2.terminals)
			if prev, ok := acked["s"]; ok && prev != id {
				t.Fatalf("retry with the nonce got %d, the acknowledged submission was %d", id, prev)
			}
			finished(t, x2, id, "s total=111", "s/prepare", "s/apply", "s/finish")
		})
	}
}

// TestRegisterWithRefuses: Since naming version 1 or one not registered,
// a level lower than the version before's, or a gated type that cannot
// write its older shape, is refused.
func TestRegisterWithRefuses(t *testing.T) {
	v2 := func() Procedure { return &shapeV2{} }
	for _, tc := range []struct {
		name    string
		opts    TypeOptions
		factory func() Procedure
		want    string
	}{
		{"version 1 gated", TypeOptions{Version: 2, Since: map[int]version.Format{1: version.Format2}}, v2, "Since names version 1"},
		{"version not registered", TypeOptions{Version: 2, Since: map[int]version.Format{3: version.Format2}}, v2, "Since names version 3"},
		{"level 0", TypeOptions{Version: 2, Since: map[int]version.Format{2: 0}}, v2, "version 2 from format 0"},
		{"levels going down", TypeOptions{Version: 3, Since: map[int]version.Format{2: 3, 3: version.Format2}}, v2, "version 3 from format 2"},
		{"no downgrader", TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format2}},
			func() Procedure { return &shapeV1{} }, "no StateDowngrader"},
		{"version 0", TypeOptions{}, v2, "version 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewRegistry().RegisterWith("shape", tc.opts, tc.factory)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RegisterWith: %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
	// Ungated (a version every older binary reads): no downgrader needed.
	if err := NewRegistry().RegisterWith("shape", TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format1}},
		func() Procedure { return &shapeV1{} }); err != nil {
		t.Fatal(err)
	}
}

// TestShapeDowngradeFails: a state the type cannot write in the older
// shape is one that does not serialise: Submit refuses it, and a step
// that leaves one fails the procedure (its tree rolls back).
func TestShapeDowngradeFails(t *testing.T) {
	mem, d := store.NewMemStore(), newDomain()
	h := shapeMember(t, mem, d, 2, 0, atFormat(version.Format1), nil)
	bad := errors.New("cannot say it in version 1")
	if _, err := h.x.Submit(&shapeV2{Name: "x", downgradeErr: bad}, SubmitOptions{}); !errors.Is(err, ErrInvalid) || !errors.Is(err, bad) {
		t.Fatalf("Submit: %v, want ErrInvalid wrapping the downgrade's error", err)
	}
	if mem.Len() != 0 {
		t.Fatalf("store holds %d procedures", mem.Len())
	}
	id := h.submit(&shapeV2{Name: "y", downgradeErr: bad, failFrom: 11}, SubmitOptions{})
	info := h.wait(id)
	if info.State != RolledBack || !strings.Contains(info.Error, bad.Error()) {
		t.Fatalf("ended %s (%s), want ROLLEDBACK for the state it could not write", info.State, info.Error)
	}
	if r := mustRecord(t, mem, id); r.typeVersion != 1 {
		t.Fatalf("stored at version %d", r.typeVersion)
	}
}
