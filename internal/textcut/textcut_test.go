package textcut

import "testing"

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{{"abc", 3, "abc"}, {"abcd", 3, "abc"}, {"aé", 2, "a"}, {"aé", 3, "aé"}, {"", 0, ""}} {
		if got := Prefix(tc.s, tc.max); got != tc.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
		}
	}
}

func TestEllipsis(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{{"abcdef", 6, "abcdef"}, {"abcdefg", 6, "abc…"}, {"abéfghi", 6, "ab…"}} {
		if got := Ellipsis(tc.s, tc.max); got != tc.want {
			t.Errorf("Ellipsis(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
		}
	}
}
