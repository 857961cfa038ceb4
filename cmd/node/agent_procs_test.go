package main

import (
	"runtime"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRaiseProcs: a master runs with at least minMasterProcs Ps unless
// the operator set GOMAXPROCS, which it leaves alone.
func TestRaiseProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	runtime.GOMAXPROCS(1)
	raiseProcs(func(string) string { return "1" }, hclog.NewNullLogger())
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("GOMAXPROCS set by the operator: raised to %d", n)
	}
	raiseProcs(func(string) string { return "" }, hclog.NewNullLogger())
	if n := runtime.GOMAXPROCS(0); n != minMasterProcs {
		t.Fatalf("GOMAXPROCS %d, want %d", n, minMasterProcs)
	}
	runtime.GOMAXPROCS(minMasterProcs + 2)
	raiseProcs(func(string) string { return "" }, hclog.NewNullLogger())
	if n := runtime.GOMAXPROCS(0); n != minMasterProcs+2 {
		t.Fatalf("a larger GOMAXPROCS was lowered to %d", n)
	}
}
