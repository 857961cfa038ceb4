// Package testcheck holds the checks that Baton's table tests of
// configurations share, so that each package's table lists its cases and
// not one more copy of how a case is judged.
package testcheck

import (
	"strings"
	"testing"
)

// Refusal judges the error of a Validate call against want, the
// substrings that error must hold; an empty want means the value is valid
// and err must be nil. A nil-versus-error mismatch stops the test (what
// follows would judge the wrong case); every missing substring is
// reported. It returns whether the value was to be refused, so that the
// caller can also check that its constructor refuses (or accepts) it.
func Refusal(t testing.TB, err error, want []string) (refused bool) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return false
	}
	if err == nil {
		t.Fatalf("Validate accepted it, want an error saying %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	return true
}
