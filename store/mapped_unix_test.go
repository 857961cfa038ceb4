//go:build unix

package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file cut short under its mapping faults when read: withMapped returns
// that as an error (a merge then fails and keeps its run) instead of the
// process dying of SIGBUS.
func TestWithMappedTurnsAFaultIntoAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	err := withMapped(path, func(data []byte) error {
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		var sum byte
		for _, b := range data {
			sum += b
		}
		t.Errorf("read %d bytes of a truncated mapping without a fault (sum %d)", len(data), sum)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "faulted") {
		t.Fatalf("withMapped over a truncated file: %v, want a fault error", err)
	}
	// The fault ended with the call: panics are this goroutine's own again.
	if err := withMapped(path, func([]byte) error { return nil }); err != nil {
		t.Fatalf("withMapped of an empty file: %v", err)
	}
}
