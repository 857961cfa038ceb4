package main

import "testing"

// TestTaggedModuleVersion: only a tag the go command stamped on the main
// module says the binary's version; a pseudo-version made up from an
// untagged commit (what a plain build of a clean clone gets) or "(devel)"
// leaves the release line's pre-release (0.2.0-dev).
func TestTaggedModuleVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"":                                   false,
		"(devel)":                            false,
		"v0.0.0-20261128225818-a2aa0cb86033": false,
		"v0.0.0-20261128225818-a2aa0cb86033+dirty": false,
		"v0.2.1-0.20261128225818-a2aa0cb86033":     false,
		"v0.2.0":                                   true,
		"v0.2.0-rc.1":                              true,
		"v0.2.0+dirty":                             true,
	} {
		if got := taggedModuleVersion(v); got != want {
			t.Errorf("taggedModuleVersion(%q) = %v, want %v", v, got, want)
		}
	}
}
