// Command provision runs a crash-proof, three-state provisioning procedure
// in one process, on a local write-ahead log: allocate a host, configure
// it, start it; if a state fails, what was done is undone, newest first.
// Kill it at any moment and run it again with the same --data-dir: it
// resumes where it stopped, and no state's effect is applied twice.
//
//	go run ./examples/provision --data-dir /tmp/provision
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// ---- The procedure: everything a user writes (35 lines). ----

// Provision brings one host up. Its exported fields are its state,
// persisted after every state by the framework.
type Provision struct {
	procedure.StateMachine
	Host string
}

const (
	allocate int32 = iota
	configure
	start
)

func (p *Provision) InitialState() int32 { return allocate }

// ExecuteState runs one state. Each must be idempotent: the state whose
// outcome was not yet stored when the process died runs again.
func (p *Provision) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	dc := ctx.Env.(*Datacenter)
	switch s {
	case allocate:
		dc.Set(p.Host, "allocated")
		p.SetNextState(configure)
	case configure:
		if err := dc.Configure(p.Host); err != nil {
			return procedure.NoMoreState, err // rolls back allocate
		}
		p.SetNextState(start)
	case start:
		dc.Set(p.Host, "running")
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

// RollbackState undoes one executed state (idempotent too).
func (p *Provision) RollbackState(ctx *procedure.Context, s int32) error {
	dc := ctx.Env.(*Datacenter)
	switch s {
	case allocate:
		dc.Set(p.Host, "")
	case configure, start:
		dc.Set(p.Host, "allocated")
	}
	return nil
}

// ---- The outside world, and running it. ----

func main() {
	dir := flag.String("data-dir", "", "the write-ahead log's directory (default: a fresh temporary one)")
	flag.Parse()
	if err := run(os.Stdout, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "provision:", err)
		os.Exit(1)
	}
}

// Register adds the example's procedure types to a registry.
func Register(r *procedure.Registry) error {
	return r.Register("provision", 1, func() procedure.Procedure { return &Provision{} })
}

func run(w io.Writer, dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "provision")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	wal, err := store.OpenWAL(store.DefaultWALConfig(dir))
	if err != nil {
		return err
	}
	defer wal.Close()
	reg := procedure.NewRegistry()
	if err := Register(reg); err != nil {
		return err
	}
	dc := NewDatacenter("db-2") // db-2's configuration fails
	x, err := procedure.New(procedure.Config{Store: wal, Registry: reg, Env: dc})
	if err != nil {
		return err
	}
	if err := x.Start(); err != nil { // resumes whatever the log holds
		return err
	}
	defer x.Stop(context.Background())
	for _, host := range []string{"web-1", "db-2"} {
		// The nonce makes a rerun find the first submission instead of
		// starting again.
		id, err := x.Submit(&Provision{Host: host}, procedure.SubmitOptions{Nonce: "provision-" + host})
		if err != nil {
			return err
		}
		info, err := x.Wait(context.Background(), id)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s", host, info.State)
		if info.Error != "" {
			fmt.Fprintf(w, " (%s)", info.Error)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "hosts:", dc.Snapshot())
	return nil
}
