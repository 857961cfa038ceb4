package admin

import (
	"testing"

	"github.com/baton-dev/baton/internal/version"
)

// builtBackend is a backend whose node runs a given binary, as
// nodeBackend's does.
type builtBackend struct {
	*fakeBackend
	build version.Build
}

func (b builtBackend) Build() version.Build { return b.build }

// TestDomainKeepsTheNodesBuild guards the wrapper the agents serve through:
// WithDomain embeds the Backend interface, which hides the node's Build, so
// a master reported (and answered ClusterStatus with) this binary's default
// build whatever it was started as.
func TestDomainKeepsTheNodesBuild(t *testing.T) {
	old := version.Build{Version: "0.1.9", MaxFormat: version.Format1}
	b := WithDomain(builtBackend{fakeBackend: &fakeBackend{id: "m1"}, build: old}, nil)
	if got := buildOf(b); got != old {
		t.Fatalf("buildOf(WithDomain(node running %+v)) = %+v", old, got)
	}
}
