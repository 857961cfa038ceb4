package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

// An agent keeps its data directory its owner's alone: directories 0700,
// files 0600, whatever the umask. One upgraded from 0.1.0 (directories
// 0755, WAL segments 0644) is tightened at start, with a warning naming
// each path and the mode it had; so is one that --data-dir names by a
// symbolic link (a directory moved to another disk), which was left as it
// was.
func TestAgentDataDirIsPrivate(t *testing.T) {
	t.Run("directory", func(t *testing.T) { agentDataDirIsPrivate(t, false) })
	t.Run("symlink", func(t *testing.T) { agentDataDirIsPrivate(t, true) })
}

func agentDataDirIsPrivate(t *testing.T, viaLink bool) {
	dir := filepath.Join(t.TempDir(), "data")
	old := filepath.Join(dir, "fsm", "left-by-0.1.0")
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Dir(old), old} {
		if err := os.Chmod(p, map[bool]fs.FileMode{true: 0o755, false: 0o644}[p != old]); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := dir
	if viaLink {
		dataDir = filepath.Join(t.TempDir(), "data-link")
		if err := os.Symlink(dir, dataDir); err != nil {
			t.Fatal(err)
		}
	}
	args, admin := devArgs(t, "--dev-regionservers", "0", "--data-dir", dataDir)
	out, stderr, cancel, done := runInBackground(map[string]string{}, args...)
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); exitOf(t, done) }) }
	t.Cleanup(stop)
	testwait.For(t, 30*time.Second, "the dev agent's banner", func() bool { return strings.Contains(out.String(), "try:") })
	// Something written through Raft and the FSM's WAL.
	if code, stdout, serr := runCLI(t, nil, "proc", "submit", "sleep", "--addr", admin, "--wait", "--timeout", "30s"); code != 0 {
		t.Fatalf("proc submit: exit %d\n%s\n%s", code, stdout, serr)
	}
	stop()
	for _, want := range []string{"was readable by other users: tightened", "path=" + old, "mode=0644", "path=" + dir + " mode=0755"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the agent's log lacks %q:\n%s", want, stderr.String())
		}
	}
	var seen int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		seen++
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, open to group or others", path, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 6 {
		t.Fatalf("walked only %d entries of %s", seen, dir)
	}
}
