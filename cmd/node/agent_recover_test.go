package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/testnet"
)

// agent --recover-quorum on a data directory without raft state (a wrong
// path, or a member whose disk was lost) is refused, exit 1, naming the
// directory, and creates nothing there; with or without --yes alike.
// The help documents the exit codes.
func TestAgentRecoverQuorumEmptyDataDir(t *testing.T) {
	for _, yes := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "data")
		raft := testnet.FreeAddr(t)
		args := []string{"agent", "--id", "n1", "--data-dir", dir, "--raft-addr", raft, "--grpc-addr", testnet.FreeAddr(t),
			"--peers", "n1=" + raft + ",n2=127.0.0.1:1", "--recover-quorum"}
		if yes {
			args = append(args, "--yes")
		}
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != exitFailed || !strings.Contains(stderr, "nothing to recover") || !strings.Contains(stderr, dir) {
			t.Fatalf("--yes %v: exit %d, want %d naming the directory and 'nothing to recover'\nstdout: %s\nstderr: %s", yes, code, exitFailed, stdout, stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("--yes %v: the refused recovery created %s (%v)", yes, dir, err)
		}
	}
	_, stdout, stderr := runCLI(t, nil, "agent", "-h")
	help := stdout + stderr
	for _, want := range []string{"-recover-quorum", "-yes", "Exit codes", "the plan was printed"} {
		if !strings.Contains(help, want) {
			t.Errorf("agent -h lacks %q", want)
		}
	}
}
