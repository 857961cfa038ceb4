package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestTuneGC: a master collects at masterGCPercent unless the operator set
// GOGC or GOMEMLIMIT, which it leaves alone.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		tuneGC(func(k string) string {
			if k == env {
				return "50"
			}
			return ""
		}, hclog.NewNullLogger())
		if got := debug.SetGCPercent(100); got != 100 {
			t.Fatalf("%s set by the operator: GOGC changed to %d", env, got)
		}
	}
	tuneGC(func(string) string { return "" }, hclog.NewNullLogger())
	if got := debug.SetGCPercent(100); got != masterGCPercent {
		t.Fatalf("GOGC %d, want %d", got, masterGCPercent)
	}
}

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
