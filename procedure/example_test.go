package procedure_test

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Inventory is the user's own system that procedures change. Its
// operations are idempotent, because a step may run again after a crash.
type Inventory struct {
	mu    sync.Mutex
	items map[string]int
}

func (inv *Inventory) Set(k string, v int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.items[k] = v
}

func (inv *Inventory) Delete(k string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	delete(inv.items, k)
}

// Restock is a state machine: reserve, then order, then confirm. It locks
// the table it restocks, and rolls back what it did if a state fails.
type Restock struct {
	procedure.StateMachine
	Table string
	Item  string
	Count int
}

const (
	reserve int32 = iota
	order
	confirm
)

func (r *Restock) InitialState() int32 { return reserve }

func (r *Restock) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	inv := ctx.Env.(*Inventory)
	switch s {
	case reserve:
		inv.Set(r.Item+"/reserved", r.Count)
		r.SetNextState(order)
	case order:
		if r.Count > 100 {
			return procedure.NoMoreState, fmt.Errorf("supplier refuses orders over 100 (asked %d)", r.Count)
		}
		inv.Set(r.Item+"/ordered", r.Count)
		r.SetNextState(confirm)
	case confirm:
		inv.Set(r.Item, r.Count)
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

func (r *Restock) RollbackState(ctx *procedure.Context, s int32) error {
	inv := ctx.Env.(*Inventory)
	switch s {
	case reserve:
		inv.Delete(r.Item + "/reserved")
	case order:
		inv.Delete(r.Item + "/ordered")
	}
	return nil
}

func (r *Restock) Locks() []scheduler.Lock {
	return scheduler.TableLocks("shop", r.Table, scheduler.Exclusive)
}

func (r *Restock) HoldLock() bool { return true }

// Example shows a user-written state machine procedure run to success, and
// one whose failure rolls back every state it executed.
func Example() {
	dir, _ := os.MkdirTemp("", "baton-example")
	defer os.RemoveAll(dir)
	wal, err := store.OpenWAL(store.DefaultWALConfig(dir))
	if err != nil {
		panic(err)
	}
	defer wal.Close()

	reg := procedure.NewRegistry()
	reg.MustRegister("restock", 1, func() procedure.Procedure { return &Restock{} })
	inv := &Inventory{items: map[string]int{}}
	exec, err := procedure.New(procedure.Config{Store: wal, Registry: reg, Env: inv})
	if err != nil {
		panic(err)
	}
	if err := exec.Start(); err != nil { // loads (and resumes) whatever the WAL holds
		panic(err)
	}
	defer exec.Stop(context.Background())

	ok, _ := exec.Submit(&Restock{Table: "fruit", Item: "apples", Count: 12}, procedure.SubmitOptions{Nonce: "restock-apples"})
	bad, _ := exec.Submit(&Restock{Table: "fruit", Item: "pears", Count: 500}, procedure.SubmitOptions{})
	for _, id := range []uint64{ok, bad} {
		info, _ := exec.Wait(context.Background(), id)
		if info.Error != "" {
			fmt.Printf("%d %s: %s\n", info.ID, info.State, info.Error)
		} else {
			fmt.Printf("%d %s\n", info.ID, info.State)
		}
	}
	fmt.Println(inv.items)
	// Output:
	// 1 SUCCESS
	// 2 ROLLEDBACK: supplier refuses orders over 100 (asked 500)
	// map[apples:12 apples/ordered:12 apples/reserved:12]
}
