package procedure

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// hostsV2 is version 2 of a type whose version 1 stored one Host: its
// state is a plain struct, upgraded from the old shape on load.
type hostsV2 struct {
	Base
	Hosts []string
}

func (h *hostsV2) UpgradeState(from int, decode func(old any) error) error {
	var v1 struct{ Host string }
	if err := decode(&v1); err != nil {
		return err
	}
	h.Hosts = []string{v1.Host}
	return nil
}

func (h *hostsV2) Execute(ctx *Context) (Step, error) {
	ctx.SetResult([]byte(strings.Join(h.Hosts, ",")))
	return Done(), nil
}

func (h *hostsV2) Rollback(*Context) error { return nil }

// TestStateUpgrade: a procedure stored by version 1 of its type loads
// through UpgradeState; one stored by version 2 decodes as it is.
func TestStateUpgrade(t *testing.T) {
	mem := store.NewMemStore()
	v1 := record{id: 1, root: 1, typeName: "hosts", typeVersion: 1, state: Runnable, data: []byte(`{"Host":"h1"}`)}
	v2data, _ := json.Marshal(&hostsV2{Hosts: []string{"h2", "h3"}})
	v2 := record{id: 2, root: 2, typeName: "hosts", typeVersion: 2, state: Runnable, data: v2data}
	_ = mem.Update(store.Proc{ID: 1, Data: v1.marshal()})
	_ = mem.Update(store.Proc{ID: 2, Data: v2.marshal()})
	cfg := Config{Store: mem, Registry: NewRegistry(), Workers: 1}
	cfg.Registry.MustRegister("hosts", 2, func() Procedure { return &hostsV2{} })
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	defer x.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id, want := range map[uint64]string{1: "h1", 2: "h2,h3"} {
		info, err := x.Wait(ctx, id)
		if err != nil || info.State != Success || string(info.Result) != want {
			t.Fatalf("procedure %d: %s, result %q, %v; want SUCCESS with %q", id, info.State, info.Result, err, want)
		}
	}
}
