package harness

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestReleasedBinaryGetsOnlyItsFlags: 0.1.0 exits on a flag it does not
// know (--debug-endpoints); a released binary is given that one by its
// environment variable, the current binary by the flag.
func TestReleasedBinaryGetsOnlyItsFlags(t *testing.T) {
	c := &Cluster{t: t, opts: Options{Binary: "/cur"}}
	n := &Node{ID: "n1", RaftAddr: "r", GRPCAddr: "g", HTTPAddr: "h", DataDir: "d"}
	c.Nodes = []*Node{n}
	cur := c.agentArgs(n, Binary{Path: "/cur"})
	old := c.agentArgs(n, Binary{Path: "/old", Release: "0.1.0"})
	if !slices.Contains(cur, "--debug-endpoints") {
		t.Errorf("current binary's args %v lack --debug-endpoints", cur)
	}
	if slices.Contains(old, "--debug-endpoints") {
		t.Errorf("0.1.0's args %v hold --debug-endpoints, which it rejects", old)
	}
	if !slices.Equal(old, slices.DeleteFunc(slices.Clone(cur), func(a string) bool { return a == "--debug-endpoints" })) {
		t.Errorf("released args %v differ from the current ones %v by more than the new flag", old, cur)
	}
	if env := agentEnv(Binary{Release: "0.1.0"}); !slices.Contains(env, "BATON_DEBUG_ENDPOINTS=1") {
		t.Errorf("released binary's env %v lacks BATON_DEBUG_ENDPOINTS=1", env)
	}
	if env := agentEnv(Binary{}); len(env) != 0 {
		t.Errorf("current binary's env %v, want none (it has the flag)", env)
	}
}

// TestBuildReleaseWithoutTheCommit: a commit the repository does not hold
// (a shallow clone) is ErrNoHistory, which the upgrade tests skip on,
// naming the version and how to fetch it.
func TestBuildReleaseWithoutTheCommit(t *testing.T) {
	_, _, err := BuildRelease(Release{"9.9.9", "00000000000000000000000000000000000000aa"})
	if !errors.Is(err, ErrNoHistory) {
		t.Fatalf("BuildRelease of an absent commit: %v, want ErrNoHistory", err)
	}
	if !strings.Contains(err.Error(), "9.9.9") {
		t.Errorf("error %q does not name the version", err)
	}
}
