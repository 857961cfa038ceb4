package procedure

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// hostsV2 is version 2 of a type whose version 1 stored one Host: its
// state is a plain struct, upgraded from the old shape on load.
type hostsV2 struct {
	Base
	Hosts []string
}

func (h *hostsV2) UpgradeState(from int, decode func(old any) error) error {
	return upgradeHosts(&h.Hosts, decode)
}

// upgradeHosts reads version 1's one Host into the list version 2 keeps.
func upgradeHosts(hosts *[]string, decode func(old any) error) error {
	var v1 struct{ Host string }
	if err := decode(&v1); err != nil {
		return err
	}
	*hosts = []string{v1.Host}
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
	cfg := Config{RecordFormat: version.Newest, Store: mem, Registry: NewRegistry(), Workers: 1}
	cfg.Registry.MustRegister("hosts", 2, func() Procedure { return &hostsV2{} })
	x := startBare(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id, want := range map[uint64]string{1: "h1", 2: "h2,h3"} {
		info, err := x.Wait(ctx, id)
		if err != nil || info.State != Success || string(info.Result) != want {
			t.Fatalf("procedure %d: %s, result %q, %v; want SUCCESS with %q", id, info.State, info.Result, err, want)
		}
	}
}

// hostsBroken is hostsV2 whose step leaves a state that cannot be
// serialised (NaN), so the failure is written with the last good state.
type hostsBroken struct {
	Base
	Hosts   []string
	F       float64
	release chan struct{}
}

func (h *hostsBroken) UpgradeState(from int, decode func(old any) error) error {
	return upgradeHosts(&h.Hosts, decode)
}

func (h *hostsBroken) Execute(*Context) (Step, error) {
	h.F = math.NaN()
	return More(), nil
}

func (h *hostsBroken) Rollback(*Context) error {
	<-h.release
	return nil
}

// TestUpgradedStateIsWhatAFailureStores: a procedure upgraded on load
// whose state then cannot be serialised is stored with its last good
// state in the current version's shape, which it is labelled with, not
// the old version's bytes.
func TestUpgradedStateIsWhatAFailureStores(t *testing.T) {
	mem := store.NewMemStore()
	v1 := record{id: 1, root: 1, typeName: "hosts", typeVersion: 1, state: Runnable, data: []byte(`{"Host":"h1"}`)}
	_ = mem.Update(store.Proc{ID: 1, Data: v1.marshal()})
	release := make(chan struct{})
	cfg := Config{RecordFormat: version.Newest, Store: mem, Registry: NewRegistry(), Workers: 1}
	cfg.Registry.MustRegister("hosts", 2, func() Procedure { return &hostsBroken{release: release} })
	startBare(t, cfg)
	var stored Info
	testwait.For(t, 10*time.Second, "the failure stored", func() bool {
		data, ok := mem.Proc(1)
		if !ok {
			return false
		}
		stored, _ = DecodeInfo(data)
		return stored.State == Failed || stored.RollingBack
	})
	close(release)
	if stored.Version != 2 || !strings.Contains(string(stored.Data), `"Hosts":["h1"]`) {
		t.Fatalf("stored as version %d with state %s; want version 2's shape", stored.Version, stored.Data)
	}
}
