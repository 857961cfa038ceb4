package rspb

import "testing"

// The labels are series the dashboards query: they must not change.
func TestOpKindLabel(t *testing.T) {
	for k, want := range map[OpKind]string{
		OpKind_OP_KIND_OPEN:  "open",
		OpKind_OP_KIND_CLOSE: "close",
		OpKind(99):           "unknown",
	} {
		if got := k.Label(); got != want {
			t.Errorf("%v.Label() = %q, want %q", k, got, want)
		}
	}
}
