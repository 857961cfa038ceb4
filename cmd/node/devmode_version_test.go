package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	semver "github.com/baton-dev/baton/internal/version"
)

// The region servers `agent --dev` runs in its own process are this
// binary: they register with the version `baton version` prints, as the
// agent's own report to the other masters does, not the library's
// default (version.Dev), which a release build (make build's
// -X main.version) is not.
func TestDevRegionServersRegisterWithTheAgentsVersion(t *testing.T) {
	linked := version
	// Registered before the agent starts, so it runs after the agent
	// has stopped (cleanups run last-in first-out).
	t.Cleanup(func() { version = linked })
	version = "v9.9.9"
	admin, _, stop := startDevAgent(t)
	want := semver.Current(readBuildInfo().Version)
	testwait.ForNil(t, 30*time.Second, "3 region servers registered with the agent's version", func() error {
		code, stdout, stderr := runCLI(t, nil, "rs", "list", "--addr", admin, "--json")
		if code != 0 {
			return fmt.Errorf("rs list: exit %d\n%s\n%s", code, stdout, stderr)
		}
		var doc serversJSON
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			return err
		}
		if len(doc.Servers) != 3 {
			return fmt.Errorf("%d region servers listed, want 3", len(doc.Servers))
		}
		for _, s := range doc.Servers {
			if s.Version != want.Version || s.MaxFormat != uint32(want.MaxFormat) {
				return fmt.Errorf("%s registered as %q format %d, want %q format %d (the agent's own build)", s.ID, s.Version, s.MaxFormat, want.Version, want.MaxFormat)
			}
		}
		return nil
	})
	stop()
}
