package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/locked"
)

// ChainPrefix names every iptables chain a Firewall makes; the pid of the
// test binary that made it follows, so a later run can tell the chains of
// a crashed run (its pid is gone) from those of one still running.
const ChainPrefix = "BATON-CHAOS-"

// Firewall cuts loopback TCP traffic between processes that run under
// uids of their own (harness.Options.UIDBase): rules in a chain of its own
// hooked into `OUTPUT -o lo`, matching the sending process's uid (`-m
// owner --uid-owner`) and a port. Every loopback dial has source
// 127.0.0.1, so addresses alone cannot tell one node from another.
//
// A Firewall belongs to one test; its chain and hook are removed by the
// test's cleanup, whatever the test's outcome, and NewFirewall removes
// those an earlier run left behind when it died before its cleanup.
type Firewall struct {
	t     testing.TB
	chain string

	mu    sync.Mutex
	rules map[string]int // how many Cuts hold each rule, by its spec
}

var chainSeq atomic.Int32

// Available reports whether partitions can be made here: root (for
// iptables and for running processes under other uids) and a working
// iptables. If not, why says what is missing.
func Available() (ok bool, why string) {
	if os.Geteuid() != 0 {
		return false, "partitions need root (iptables, per-process uids); run as root to include them"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, "iptables not found: partitions between processes need it"
	}
	if _, err := ipt("-S", "OUTPUT"); err != nil {
		return false, fmt.Sprintf("iptables does not work here: %v", err)
	}
	return true, ""
}

// NewFirewall makes the test's chain and hooks it into OUTPUT. It skips
// the test, saying why, unless Available.
func NewFirewall(t testing.TB) *Firewall {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("chaos: " + why)
	}
	if err := SweepChains(); err != nil {
		t.Logf("chaos: sweep of leftover chains: %v", err)
	}
	f := &Firewall{t: t, chain: fmt.Sprintf("%s%d-%d", ChainPrefix, os.Getpid(), chainSeq.Add(1)), rules: map[string]int{}}
	if _, err := ipt("-N", f.chain); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	// Cleanup is registered before the hook so a failed hook still
	// removes the chain.
	t.Cleanup(f.remove)
	if _, err := ipt("-I", "OUTPUT", "-o", "lo", "-j", f.chain); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	return f
}

// Chain returns the name of the firewall's chain.
func (f *Firewall) Chain() string { return f.chain }

// ipt runs iptables (waiting for the xtables lock, which another
// iptables user such as Docker may hold) and returns its output.
func ipt(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "iptables", append([]string{"-w", "10"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.String(), nil
}

// SweepChains removes the chains (and their OUTPUT hooks) of runs whose
// process has gone: what a test binary killed before its cleanup leaves.
func SweepChains() error {
	out, err := ipt("-S")
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(out, "\n") {
		name, ok := strings.CutPrefix(line, "-N "+ChainPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(name, "-")
		pid, err := strconv.Atoi(pidText)
		if err == nil && pid != os.Getpid() && alive(pid) {
			continue // a run still going on
		}
		if err == nil && pid == os.Getpid() {
			continue // this binary's own: removed by its tests' cleanups
		}
		errs = append(errs, dropChain(ChainPrefix+name))
	}
	return errors.Join(errs...)
}

// DropOwnChains removes the chains this process made that are still
// there (a test's cleanup removes its own; this is for the paths that run
// none: a signal, a panic outside the test goroutine).
func DropOwnChains() error {
	if os.Geteuid() != 0 {
		return nil
	}
	out, err := ipt("-S")
	if err != nil {
		return err
	}
	var errs []error
	own := fmt.Sprintf("-N %s%d-", ChainPrefix, os.Getpid())
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, own) {
			errs = append(errs, dropChain(strings.TrimPrefix(line, "-N ")))
		}
	}
	return errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// dropChain unhooks, flushes and deletes a chain. Every hook is removed,
// however many an interrupted run added.
func dropChain(chain string) error {
	for {
		if _, err := ipt("-D", "OUTPUT", "-o", "lo", "-j", chain); err != nil {
			break // no hook left
		}
	}
	var errs []error
	if _, err := ipt("-F", chain); err != nil {
		errs = append(errs, err)
	}
	if _, err := ipt("-X", chain); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (f *Firewall) remove() {
	if err := dropChain(f.chain); err != nil {
		f.t.Errorf("chaos: remove iptables chain %s: %v", f.chain, err)
	}
}

// Drop adds a rule dropping TCP packets sent on loopback by processes of
// r.UID to port r.DPort (if > 0) and from port r.SPort (if > 0). A rule is
// identified by what it matches: adding one that is there already only
// counts one more holder (see Cut).
func (f *Firewall) Drop(r Rule) error {
	spec := r.spec()
	key := strings.Join(spec, " ")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules[key] == 0 {
		if _, err := ipt(append([]string{"-A", f.chain}, spec...)...); err != nil {
			return err
		}
	}
	f.rules[key]++
	return nil
}

// Rule is one drop rule: TCP packets sent by processes of UID to DPort
// and from SPort (0: any port).
type Rule struct {
	UID          uint32
	DPort, SPort int
}

func (r Rule) spec() []string {
	spec := []string{"-p", "tcp", "-m", "owner", "--uid-owner", strconv.FormatUint(uint64(r.UID), 10)}
	if r.DPort > 0 {
		spec = append(spec, "--dport", strconv.Itoa(r.DPort))
	}
	if r.SPort > 0 {
		spec = append(spec, "--sport", strconv.Itoa(r.SPort))
	}
	return append(spec, "-j", "DROP")
}

// Cut adds rules and returns a function that removes exactly those
// (rules another Cut holds too stay until it heals as well): partitions
// that overlap in time heal independently.
func (f *Firewall) Cut(rules []Rule) (heal func() error, err error) {
	var added []Rule
	heal = func() error {
		var errs []error
		for _, r := range added {
			errs = append(errs, f.undrop(r))
		}
		return errors.Join(errs...)
	}
	for _, r := range rules {
		if err := f.Drop(r); err != nil {
			return heal, errors.Join(err, heal())
		}
		added = append(added, r)
	}
	return heal, nil
}

// undrop releases one hold on rule r, and removes it with the last.
func (f *Firewall) undrop(r Rule) error {
	spec := r.spec()
	key := strings.Join(spec, " ")
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.rules[key] {
	case 0:
		return nil // healed meanwhile (Heal)
	case 1:
		if _, err := ipt(append([]string{"-D", f.chain}, spec...)...); err != nil {
			return err
		}
		delete(f.rules, key)
	default:
		f.rules[key]--
	}
	return nil
}

// Heal removes every rule of the chain (the hook stays).
func (f *Firewall) Heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := ipt("-F", f.chain); err != nil {
		return err
	}
	f.rules = map[string]int{}
	return nil
}

// Rules returns how many rules the chain holds now.
func (f *Firewall) Rules() int {
	return locked.Call(&f.mu, func() int { return len(f.rules) })
}

// Port returns the port of a host:port address (0 if it has none).
func Port(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0
	}
	p, _ := strconv.Atoi(addr[i+1:])
	return p
}
