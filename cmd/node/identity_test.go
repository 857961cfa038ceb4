package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/syncbuf"
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
	args := agentArgs("n1")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		done <- c.run(args)
	}()
	waitLeader(t, grpc, "n1", "n1 to lead")
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("n1 stopped with exit %d: %s", code, errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("n1 did not stop")
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
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	args = agentArgs("n1")
	go func() {
		c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		done <- c.run(args)
	}()
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
