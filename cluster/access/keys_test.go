package access

import (
	"fmt"
	"math"
	"testing"
)

// TestAuditKeyOf: an id is numbered only in the form the trail writes
// ("term-n", no sign, no leading zero), as the fmt round trip it replaced
// decided.
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
			continue
		}
		var term, n uint64
		if ok {
			fmt.Sscanf(id, "%d-%d", &term, &n)
			if key != AuditKey(term, n) {
				t.Errorf("AuditKeyOf(%q) = %q, want %q", id, key, AuditKey(term, n))
			}
		}
	}
}
