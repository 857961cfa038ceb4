// Package provisionproc is the procedure the provision and cluster
// examples share (a library, not an example to run): bring a host up in
// three states (allocate, configure, start), undoing what was done if a
// state fails. The procedure is all its user writes; Datacenter stands for
// the system it changes.
package provisionproc

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/baton-dev/baton/procedure"
)

// The procedure: everything a user writes (35 lines).

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

// Register adds the procedure's type to a registry.
func Register(r *procedure.Registry) error {
	return r.Register("provision", 1, func() procedure.Procedure { return &Provision{} })
}

// Datacenter stands for the system a procedure changes: hosts and their
// states. Its calls are idempotent (setting a state twice is setting it
// once), as the calls of a procedure's steps must be.
type Datacenter struct {
	mu     sync.Mutex
	hosts  map[string]string
	broken map[string]bool
	// Configuring, if set, is told each host as its configuration starts,
	// and the configuration then waits for Proceed to be closed: the
	// cluster example kills the leader there.
	Configuring chan<- string
	Proceed     <-chan struct{}
}

// NewDatacenter returns a datacenter whose broken hosts fail to configure.
func NewDatacenter(broken ...string) *Datacenter {
	dc := &Datacenter{hosts: map[string]string{}, broken: map[string]bool{}}
	for _, h := range broken {
		dc.broken[h] = true
	}
	return dc
}

// Set sets host's state ("" removes it).
func (dc *Datacenter) Set(host, state string) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if state == "" {
		delete(dc.hosts, host)
		return
	}
	dc.hosts[host] = state
}

// Configure configures host, or fails for a broken one.
func (dc *Datacenter) Configure(host string) error {
	if dc.broken[host] {
		return fmt.Errorf("%s: configuration failed: disk not found", host)
	}
	if dc.Configuring != nil {
		dc.Configuring <- host
		<-dc.Proceed
	}
	dc.Set(host, "configured")
	return nil
}

// Snapshot lists the hosts and their states, sorted.
func (dc *Datacenter) Snapshot() string {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	var out []string
	for h, s := range dc.hosts {
		out = append(out, h+"="+s)
	}
	sort.Strings(out)
	return "[" + strings.Join(out, " ") + "]"
}
