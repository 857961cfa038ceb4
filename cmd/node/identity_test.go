package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestAgentRefusesAnotherNodesDataDir: a data directory that node n1
// created, started with --id n2, is refused at once (exit 1) with both ids
// named, instead of idling as a stranger to its own cluster.
func TestAgentRefusesAnotherNodesDataDir(t *testing.T) {
	dir := t.TempDir()
	raft, grpc := testnet.FreeAddr(t), testnet.FreeAddr(t)
	agentArgs := func(id string) []string {
		return []string{"agent", "--id", id, "--data-dir", dir, "--raft-addr", raft, "--grpc-addr", grpc, "--http-addr", "",
			"--peers", id + "=" + raft}
	}

	// n1's first start creates the directory; it runs until cancelled.
	_, errb, cancel, done := runInBackground(nil, agentArgs("n1")...)
	waitLeader(t, grpc, "n1", "n1 to lead")
	cancel()
	if code := within(t, done, 60*time.Second, "n1 did not stop"); code != exitOK {
		t.Fatalf("n1 stopped with exit %d: %s", code, errb.String())
	}

	code, stdout, stderr := runCLI(t, nil, agentArgs("n2")...)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, stdout, stderr)
	}
	for _, want := range []string{`created by node "n1"`, `this node's id is "n2"`, dir, "--id n1"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// The right id still starts.
	_, _, cancel, done = runInBackground(nil, agentArgs("n1")...)
	defer cancel()
	waitLeader(t, grpc, "n1", "n1 to lead again")
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("n1 restarted stopped with exit %d", code)
	}
}

// waitLeader waits until 'cluster status' at addr names id the leader.
func waitLeader(t *testing.T, addr, id, what string) {
	t.Helper()
	testwait.ForNil(t, 60*time.Second, what, func() error {
		code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", addr, "--timeout", "2s")
		if code != exitOK || !strings.Contains(stdout, "leader       "+id) {
			return fmt.Errorf("status: exit %d: %s%s", code, stdout, stderr)
		}
		return nil
	})
}
