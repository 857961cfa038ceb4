package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/domain"
)

// cancelAfterFirstWrite stands for Ctrl-C arriving mid-transfer: the CLI's
// context is cancelled once the first bytes reach the file.
type cancelAfterFirstWrite struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (c *cancelAfterFirstWrite) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.cancel()
	return n, err
}

// Where FILE cannot be made, or is already something, save fails cleanly
// or replaces it whole: no temporary file is left, an older FILE stays as
// it was on failure, and a replaced one is private (0600) whatever its
// mode was.
func TestSnapshotSaveFileCases(t *testing.T) {
	fc := snapshotCluster(t)
	addr := fc.AdminAddrs()[1]
	dir := t.TempDir()
	noLeftovers := func(t *testing.T) {
		t.Helper()
		if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(left) > 0 {
			t.Fatalf("left behind: %v", left)
		}
	}

	t.Run("its directory does not exist", func(t *testing.T) {
		code, _, stderr := runCLI(t, nil, "snapshot", "save", filepath.Join(dir, "none", "snap"), "--addr", addr)
		if code != 1 || !strings.Contains(stderr, "no such file or directory") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("an older file of another mode is replaced, private", func(t *testing.T) {
		file := filepath.Join(dir, "older")
		if err := os.WriteFile(file, []byte("older"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, nil, "snapshot", "save", file, "--addr", addr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		st, err := os.Stat(file)
		if err != nil || st.Mode().Perm() != snapshotFileMode {
			t.Fatalf("after save: %v %v, want mode %o", st, err, snapshotFileMode)
		}
		if code, _, stderr := runCLI(t, nil, "snapshot", "inspect", file); code != 0 {
			t.Fatalf("inspect: exit %d: %s", code, stderr)
		}
		noLeftovers(t)
	})

	t.Run("a symlink is replaced, its target left as it was", func(t *testing.T) {
		target := filepath.Join(dir, "target")
		if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, nil, "snapshot", "save", link, "--addr", addr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if b, _ := os.ReadFile(target); !bytes.Equal(b, []byte("target")) {
			t.Fatalf("the link's target now holds %d bytes", len(b))
		}
		if st, err := os.Lstat(link); err != nil || !st.Mode().IsRegular() {
			t.Fatalf("the link after save: %v %v, want a regular file", st, err)
		}
		noLeftovers(t)
	})

	t.Run("Ctrl-C mid-transfer", func(t *testing.T) {
		// Larger than the CLI's write buffer, so that the file's first
		// write comes while the stream still runs.
		fc.SeedTable("ns1:big", domain.TableEnabled, 20_000, 7, func(int) domain.Region { return domain.Region{State: domain.RegionOffline} })
		file := filepath.Join(dir, "interrupted")
		if err := os.WriteFile(file, []byte("older"), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		snapshotWriteHook = func(w io.Writer) io.Writer { return &cancelAfterFirstWrite{w: w, cancel: cancel} }
		defer func() { snapshotWriteHook = nil }()
		var out, errb bytes.Buffer
		c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		code := c.run([]string{"snapshot", "save", file, "--addr", addr})
		if code == 0 {
			t.Fatalf("exit 0 after the context was cancelled: %s", out.String())
		}
		if b, _ := os.ReadFile(file); string(b) != "older" {
			t.Fatalf("exit %d, file now %d bytes, want the older one", code, len(b))
		}
		noLeftovers(t)
		t.Logf("exit %d: %s", code, strings.TrimSpace(errb.String()))
	})
}
