package procedure

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// gated finishes once its gate is closed. It gives up when its executor
// stops (not a failure: the step runs again after a restart), so a Stop
// never waits on a gate nobody will close: with one worker, whether the
// step is running when the test stops the executor is a race.
type gated struct {
	Base
	gate chan struct{}
}

func (g *gated) Execute(ctx *Context) (Step, error) {
	select {
	case <-g.gate:
		return Done(), nil
	case <-ctx.Done():
		return Step{}, ctx.Err()
	}
}

func (g *gated) Rollback(*Context) error { return nil }

// TestSubmitterIsPersisted: the submitter a procedure was submitted with is
// in its record while it runs, loaded with it by a new executor, and kept
// in a finished root's compact record; a record without one (written
// before submitters were kept) reads as none.
func TestSubmitterIsPersisted(t *testing.T) {
	mem := store.NewMemStore()
	gate := make(chan struct{})
	start := func() *Executor {
		cfg := Config{RecordFormat: version.Newest, Store: mem, Registry: NewRegistry(), Workers: 1}
		cfg.Registry.MustRegister("gated", 1, func() Procedure { return &gated{gate: gate} })
		x, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Start(); err != nil {
			t.Fatal(err)
		}
		return x
	}
	stored := func(id uint64) Info {
		t.Helper()
		var data []byte
		if _, err := mem.Load(func(p store.Proc) error {
			if p.ID == id {
				data = p.Data
			}
			return nil
		}); err != nil || data == nil {
			t.Fatalf("procedure %d not stored: %v", id, err)
		}
		info, err := DecodeInfo(data)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := DecodeSummary(data)
		if err != nil || string(sum.Submitter) != info.Submitter {
			t.Fatalf("summary of %d: submitter %q, %v; record's %q", id, sum.Submitter, err, info.Submitter)
		}
		return info
	}
	old := record{id: 7, root: 7, typeName: "gated", typeVersion: 1, state: Runnable, owner: "o"}
	if err := mem.Update(store.Proc{ID: 7, Data: old.marshal()}); err != nil {
		t.Fatal(err)
	}
	x := start()
	id, err := x.Submit(&gated{gate: gate}, SubmitOptions{Owner: "label", Submitter: "client/ops"})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(id).Submitter; got != "client/ops" {
		t.Fatalf("running record's submitter %q, want client/ops", got)
	}
	if info, _ := x.Get(id); info.Submitter != "client/ops" {
		t.Fatalf("Get's submitter %q, want client/ops", info.Submitter)
	}
	_ = x.Stop(context.Background())

	x = start()
	defer x.Stop(context.Background())
	if info, err := x.Get(id); err != nil || info.Submitter != "client/ops" || info.Owner != "label" {
		t.Fatalf("loaded: %+v, %v; want submitter client/ops, owner label", info, err)
	}
	if info, err := x.Get(7); err != nil || info.Submitter != "" {
		t.Fatalf("record without a submitter loaded as %+v, %v", info, err)
	}
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := x.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := stored(id); got.Submitter != "client/ops" || !got.State.Terminal() {
		t.Fatalf("finished root's record: state %v, submitter %q", got.State, got.Submitter)
	}
}
