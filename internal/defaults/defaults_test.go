package defaults

import (
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{{0, time.Second}, {-1, -1}, {3, 3}} {
		v := tc.in
		Set(&v, time.Second)
		if v != tc.want {
			t.Errorf("Set(%v) = %v, want %v", tc.in, v, tc.want)
		}
	}
	var s string
	Set(&s, "x")
	if s != "x" {
		t.Errorf("Set(\"\") = %q", s)
	}
	var i interface{ String() string }
	Set(&i, interface{ String() string }(time.Second))
	if i == nil {
		t.Error("Set(nil interface) left it nil")
	}
}

func TestPositive(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, 7}, {-1, 7}, {3, 3}} {
		v := tc.in
		Positive(&v, 7)
		if v != tc.want {
			t.Errorf("Positive(%d) = %d, want %d", tc.in, v, tc.want)
		}
	}
}
