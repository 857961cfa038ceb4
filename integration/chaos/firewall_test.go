package chaos

import (
	"strings"
	"testing"
)

// TestCutsHealIndependently: a rule two cuts share stays until both have
// healed.
func TestCutsHealIndependently(t *testing.T) {
	fw := NewFirewall(t) // skips unless root with iptables
	// uid 2147483600 runs nothing: the rules drop nothing real.
	shared := Rule{UID: 2147483600, DPort: 9}
	healA, err := fw.Cut([]Rule{shared, {UID: 2147483600, SPort: 10}})
	if err != nil {
		t.Fatal(err)
	}
	healB, err := fw.Cut([]Rule{shared})
	if err != nil {
		t.Fatal(err)
	}
	rules := func() int {
		out, err := ipt("-S", fw.Chain())
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(out, "-A "+fw.Chain())
	}
	if n := rules(); n != 2 {
		t.Fatalf("%d rules in the chain, want 2", n)
	}
	if err := healA(); err != nil {
		t.Fatal(err)
	}
	if n := rules(); n != 1 {
		t.Fatalf("after the first heal: %d rules, want 1 (the shared one)", n)
	}
	if err := healB(); err != nil {
		t.Fatal(err)
	}
	if n := rules(); n != 0 {
		t.Fatalf("after both heals: %d rules, want 0", n)
	}
}
