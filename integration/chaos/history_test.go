package chaos

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker itself, on hand-made histories: it must accept what a
// correct system may answer (also around operations of unknown outcome)
// and reject a stale read.
func TestNamespaceModel(t *testing.T) {
	keys := []string{"a", "b"}
	cases := []struct {
		name  string
		build func(h *History)
		want  porcupine.CheckResult
		stale int
	}{
		{"sequential", func(h *History) {
			h.Write(0, OpCreate, "a", 0, 10, Done)
			h.List(0, 20, 30, []string{"default", "a"})
			h.Write(0, OpCreate, "a", 40, 50, NoOp)
			h.Write(0, OpDelete, "a", 60, 70, Done)
			h.Write(0, OpDelete, "a", 80, 90, NoOp)
			h.List(0, 100, 110, nil)
		}, porcupine.Ok, 0},
		{"concurrent read may see either", func(h *History) {
			h.Write(0, OpCreate, "a", 0, 50, Done)
			h.List(1, 10, 20, nil)
			h.List(2, 30, 40, []string{"a"})
		}, porcupine.Ok, 0},
		{"unknown create may apply late", func(h *History) {
			h.Write(0, OpCreate, "b", 0, 10, Unknown)
			h.List(1, 20, 30, nil)
			h.List(1, 40, 50, []string{"b"})
		}, porcupine.Ok, 0},
		{"stale read after create", func(h *History) {
			h.Write(0, OpCreate, "a", 0, 10, Done)
			h.List(1, 20, 30, nil)
		}, porcupine.Illegal, 1},
		{"read goes back in time", func(h *History) {
			h.Write(0, OpCreate, "a", 0, 100, Done)
			h.List(1, 10, 20, []string{"a"})
			h.List(1, 30, 40, nil)
		}, porcupine.Illegal, 0},
		{"create ok twice", func(h *History) {
			h.Write(0, OpCreate, "a", 0, 10, Done)
			h.Write(1, OpCreate, "a", 20, 30, Done)
		}, porcupine.Illegal, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory(keys)
			tc.build(h)
			dir := t.TempDir()
			res, err := h.Check(10*time.Second, dir, "h")
			if err != nil {
				t.Fatal(err)
			}
			if res.Result != tc.want || res.Stale != tc.stale {
				t.Fatalf("got %s with %d stale reads (%v), want %s with %d", res.Result, res.Stale, res.Samples, tc.want, tc.stale)
			}
			if tc.want == porcupine.Illegal {
				if len(res.Visualizations) != 1 {
					t.Fatalf("visualizations %v, want one (key a)", res.Visualizations)
				}
				b, err := os.ReadFile(res.Visualizations[0])
				if err != nil || !strings.Contains(string(b), "<html") {
					t.Fatalf("visualization %s: %v (%d bytes)", res.Visualizations[0], err, len(b))
				}
			}
		})
	}
}

// TestSweepChains: a chain left by a run whose process is gone is
// removed, hook included; one of a live process stays.
func TestSweepChains(t *testing.T) {
	if ok, why := Available(); !ok {
		t.Skip("chaos: " + why)
	}
	// pid 0x7ffffffe is above any pid_max: no such process.
	dead := ChainPrefix + "2147483646-1"
	if _, err := ipt("-N", dead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropChain(dead) })
	if _, err := ipt("-I", "OUTPUT", "-o", "lo", "-j", dead); err != nil {
		t.Fatal(err)
	}
	live := NewFirewall(t) // sweeps, and is this live process's
	out, err := ipt("-S")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, dead) {
		t.Fatalf("leftover chain %s not swept:\n%s", dead, out)
	}
	if !strings.Contains(out, "-N "+live.Chain()) || !strings.Contains(out, "-j "+live.Chain()) {
		t.Fatalf("live chain %s or its hook missing:\n%s", live.Chain(), out)
	}
}
