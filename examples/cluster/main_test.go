package main

import (
	"strings"
	"testing"
)

// TestFailoverFinishesTheProcedure runs the example: the procedure the
// killed leader started, the new leader finishes.
func TestFailoverFinishesTheProcedure(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"configuring web-1; killing", "new leader elected", "web-1: SUCCESS, hosts [web-1=running]",
		"runs: the killed leader wrote 1-", ", the new leader wrote "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
