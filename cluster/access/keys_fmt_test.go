package access

// AuditKeyOf against the fmt round trip it replaced. (The comparison was
// written by a reviewer of the change; it held.)

import (
	"fmt"
	"math"
	"strconv"
	"testing"
)

// fmtAuditKeyOf is AuditKeyOf as it was: fmt.Sscanf and a Sprintf round
// trip.
func fmtAuditKeyOf(id string) (string, bool) {
	var term, n uint64
	if _, err := fmt.Sscanf(id, "%d-%d", &term, &n); err != nil || fmt.Sprintf("%d-%d", term, n) != id {
		return "", false
	}
	return AuditKey(term, n), true
}

// TestAuditKeyOfAgreesWithFmt: every string up to 6 characters over an
// alphabet of digits, signs, separators and spaces, plus the uint64
// boundaries, is decided (and keyed) as the fmt version did.
func TestAuditKeyOfAgreesWithFmt(t *testing.T) {
	alpha := []byte("019-+ _x\n\t")
	check := func(id string) {
		t.Helper()
		k1, ok1 := AuditKeyOf(id)
		k0, ok0 := fmtAuditKeyOf(id)
		if ok1 != ok0 || k1 != k0 {
			t.Fatalf("AuditKeyOf(%q) = %q, %v; old %q, %v", id, k1, ok1, k0, ok0)
		}
	}
	var gen func(prefix []byte, left int)
	gen = func(prefix []byte, left int) {
		check(string(prefix))
		if left == 0 {
			return
		}
		for _, c := range alpha {
			gen(append(prefix, c), left-1)
		}
	}
	gen(nil, 6)
	max := strconv.FormatUint(^uint64(0), 10)
	for _, a := range []string{"0", "1", max, "18446744073709551616", "99999999999999999999", "0x10", "0b1", "1_0", "00", "-0", "+0", "१"} {
		for _, b := range []string{"0", "7", max, "18446744073709551616", "0x10", "1e3", "-1", "1 ", "\n1"} {
			check(a + "-" + b)
		}
	}
}

// TestAuditKeyOf: an id is numbered only in the form the trail writes
// ("term-n", no sign, no leading zero).
func TestAuditKeyOf(t *testing.T) {
	for id, want := range map[string]bool{
		"1-2": true, "0-0": true, fmt.Sprintf("%d-%d", uint64(math.MaxUint64), 7): true,
		"": false, "1": false, "-1": false, "1-": false, "-1-2": false, "+1-2": false, "1-+2": false,
		"01-2": false, "1-02": false, "1-2-3": false, " 1-2": false, "1-2 ": false, "a-b": false,
		"18446744073709551616-1": false, // past uint64
	} {
		key, ok := AuditKeyOf(id)
		if ok != want {
			t.Errorf("AuditKeyOf(%q) = %v, want %v", id, ok, want)
		} else if fkey, _ := fmtAuditKeyOf(id); key != fkey {
			t.Errorf("AuditKeyOf(%q) = %q, want %q", id, key, fkey)
		}
	}
}
