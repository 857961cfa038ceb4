package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Datacenter stands for the system a procedure changes: hosts and their
// states. Its calls are idempotent (setting a state twice is setting it
// once), as the calls of a procedure's steps must be.
type Datacenter struct {
	mu     sync.Mutex
	hosts  map[string]string
	broken map[string]bool
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
