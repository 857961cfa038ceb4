package main

import (
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
