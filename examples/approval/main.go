// Command approval runs a procedure that waits for an outside event, a
// person's approval, with a deadline: approved in time, the change is
// applied; not, it is rolled back. While it waits it holds no worker: it
// is suspended on an event, and the timer wakes it at the deadline.
//
//	go run ./examples/approval
//
// Each example reads on its own: its states and steps are written out in
// full, alike in shape to the other examples' but on purpose not shared.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Change applies a configuration change once it is approved.
type Change struct {
	procedure.StateMachine
	Name     string
	Wait     time.Duration // how long to wait for the approval
	Deadline time.Time     // set when it starts waiting; persisted, so a restart keeps it
}

const (
	request int32 = iota
	awaitApproval
	apply
)

func (c *Change) InitialState() int32 { return request }

func (c *Change) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	b := ctx.Env.(*Board)
	switch s {
	case request:
		b.Request(c.Name)
		c.Deadline = ctx.Now().Add(c.Wait)
		c.SetNextState(awaitApproval)
	case awaitApproval:
		if b.Approved(c.Name) {
			c.SetNextState(apply)
			break
		}
		left := c.Deadline.Sub(ctx.Now())
		if left <= 0 {
			return procedure.NoMoreState, fmt.Errorf("%s: not approved within %v", c.Name, c.Wait)
		}
		// Runs this state again when the board says so, or at the
		// deadline, whichever comes first.
		ctx.Suspend(procedure.OnEvent(b.Event(c.Name)), procedure.Timeout(left), procedure.Because("waiting for approval"))
	case apply:
		b.Apply(c.Name)
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

func (c *Change) RollbackState(ctx *procedure.Context, s int32) error {
	if s == request {
		ctx.Env.(*Board).Withdraw(c.Name)
	}
	return nil
}

// Board is where changes are requested and approved. An approval wakes
// the change waiting for it (Executor.Wake).
type Board struct {
	mu     sync.Mutex
	status map[string]string
	events map[string]*scheduler.Event
}

func NewBoard() *Board {
	return &Board{status: map[string]string{}, events: map[string]*scheduler.Event{}}
}

// Event is the event a change's approval wakes.
func (b *Board) Event(name string) *scheduler.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events[name] == nil {
		b.events[name] = scheduler.NewEvent("approval of " + name)
	}
	return b.events[name]
}

func (b *Board) set(name, st string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status[name] = st
}

func (b *Board) Request(name string)  { b.set(name, "requested") }
func (b *Board) Withdraw(name string) { b.set(name, "withdrawn") }
func (b *Board) Apply(name string)    { b.set(name, "applied") }

// Approve approves a change and wakes it through x.
func (b *Board) Approve(x *procedure.Executor, name string) {
	b.set(name, "approved")
	x.Wake(b.Event(name))
}

func (b *Board) Approved(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status[name] == "approved" || b.status[name] == "applied"
}

func (b *Board) Status(name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status[name]
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "approval:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	reg := procedure.NewRegistry()
	if err := reg.Register("change", 1, func() procedure.Procedure { return &Change{} }); err != nil {
		return err
	}
	board := NewBoard()
	x, err := procedure.New(procedure.Config{Store: store.NewMemStore(), Registry: reg, Env: board, RecordFormat: version.Newest})
	if err != nil {
		return err
	}
	if err := x.Start(); err != nil {
		return err
	}
	defer x.Stop(context.Background())
	approved, err := x.Submit(&Change{Name: "raise-quota", Wait: time.Minute}, procedure.SubmitOptions{})
	if err != nil {
		return err
	}
	ignored, err := x.Submit(&Change{Name: "open-firewall", Wait: 200 * time.Millisecond}, procedure.SubmitOptions{})
	if err != nil {
		return err
	}
	// Someone approves raise-quota once it waits for it.
	for {
		why, err := x.Why(approved)
		if err != nil {
			return err
		}
		if why.Note == "waiting for approval" {
			break
		}
		time.Sleep(10 * time.Millisecond) // a person's reaction time
	}
	fmt.Fprintln(w, "raise-quota waits for approval; approving it")
	board.Approve(x, "raise-quota")
	for _, id := range []uint64{approved, ignored} {
		info, err := x.Wait(context.Background(), id)
		if err != nil {
			return err
		}
		name := "raise-quota"
		if id == ignored {
			name = "open-firewall"
		}
		fmt.Fprintf(w, "%s: %s, %s", name, info.State, board.Status(name))
		if info.Error != "" {
			fmt.Fprintf(w, " (%s)", info.Error)
		}
		fmt.Fprintln(w)
	}
	return nil
}
