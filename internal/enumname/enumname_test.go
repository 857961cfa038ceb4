package enumname

import "testing"

type small uint8

type signed int

func TestFormat(t *testing.T) {
	names := []string{"", "one", "two"}
	for _, tc := range []struct {
		v    small
		want string
	}{{0, "small(0)"}, {1, "one"}, {2, "two"}, {3, "small(3)"}, {255, "small(255)"}} {
		if got := Format(tc.v, names, "small(%d)"); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if got := Format(signed(-1), names, "signed(%d)"); got != "signed(-1)" {
		t.Errorf("Format(-1) = %q", got)
	}
}

func TestLookup(t *testing.T) {
	names := []string{"zero", ""}
	for _, tc := range []struct {
		v      signed
		want   string
		wantOK bool
	}{{-1, "", false}, {0, "zero", true}, {1, "", false}, {2, "", false}} {
		if got, ok := Lookup(tc.v, names); got != tc.want || ok != tc.wantOK {
			t.Errorf("Lookup(%d) = %q, %v; want %q, %v", tc.v, got, ok, tc.want, tc.wantOK)
		}
	}
}
