package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// restore builds a member's directory (exit 0, --json names what it
// built); the same again into it is refused (exit 1) and leaves it as it
// was; a bad file is refused (exit 1) before anything is written; a bad
// command line is exit 2.
func TestSnapshotRestoreCLI(t *testing.T) {
	good, _ := goodSnapshotFile(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.baton")
	if err := os.WriteFile(file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	peers := "m1=127.0.0.1:7001,m2=127.0.0.1:7002,m3=127.0.0.1:7003"
	data := filepath.Join(dir, "m1")
	code, stdout, stderr := runCLI(t, nil, "snapshot", "restore", file, "--data-dir", data, "--id", "m1", "--peers", peers, "--json")
	var doc snapshotRestoreJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("restore: exit %d: %s %s", code, stdout, stderr)
	}
	if doc.ID != "m1" || doc.Index != 3 || doc.Term != 1 || doc.Keys != 51 || doc.RestoredFrom != "abc" || doc.Peers != peers || doc.Snapshot == "" {
		t.Fatalf("restore document %+v", doc)
	}
	if b, err := os.ReadFile(filepath.Join(data, "node-id")); err != nil || string(b) != "m1\n" {
		t.Fatalf("node-id %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(data, "snapshots", doc.Snapshot, "state.bin")); err != nil {
		t.Fatalf("raft snapshot: %v", err)
	}

	before, _ := os.ReadDir(data)
	code, stdout, stderr = runCLI(t, nil, "snapshot", "restore", file, "--data-dir", data, "--id", "m1", "--peers", peers, "--json")
	var fail map[string]map[string]any
	if code != 1 || json.Unmarshal([]byte(stdout), &fail) != nil || fail["error"]["code"] != "DATA_DIR_NOT_EMPTY" || !strings.Contains(stderr, "node-id") {
		t.Fatalf("restore into a restored directory: exit %d: %s %s", code, stdout, stderr)
	}
	if after, _ := os.ReadDir(data); len(after) != len(before) {
		t.Fatalf("refused restore changed %s: %d entries, then %d", data, len(before), len(after))
	}

	cut := filepath.Join(dir, "cut.baton")
	if err := os.WriteFile(cut, good[:len(good)-7], 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, nil, "snapshot", "restore", cut, "--data-dir", filepath.Join(dir, "m2"), "--id", "m2", "--peers", peers, "--json")
	if code != 1 || json.Unmarshal([]byte(stdout), &fail) != nil || fail["error"]["code"] != "BAD_SNAPSHOT" || !strings.Contains(stderr, "truncated") {
		t.Fatalf("restore of a cut file: exit %d: %s %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "m2")); !os.IsNotExist(err) {
		t.Fatalf("refused restore created its directory (%v)", err)
	}

	for name, args := range map[string][]string{
		"no file":         {"--data-dir", filepath.Join(dir, "x"), "--id", "m1", "--peers", peers},
		"no data dir":     {file, "--id", "m1", "--peers", peers},
		"no id":           {file, "--data-dir", filepath.Join(dir, "x"), "--peers", peers},
		"no peers":        {file, "--data-dir", filepath.Join(dir, "x"), "--id", "m1"},
		"id not in peers": {file, "--data-dir", filepath.Join(dir, "x"), "--id", "m9", "--peers", peers},
		"bad peers":       {file, "--data-dir", filepath.Join(dir, "x"), "--id", "m1", "--peers", "m1=nohost"},
		"unknown flag":    {file, "--data-dir", filepath.Join(dir, "x"), "--id", "m1", "--peers", peers, "--bootstrap"},
		"two files":       {file, file, "--data-dir", filepath.Join(dir, "x"), "--id", "m1", "--peers", peers},
	} {
		if code, _, stderr := runCLI(t, nil, append([]string{"snapshot", "restore"}, args...)...); code != 2 {
			t.Errorf("%s: exit %d (%s), want 2", name, code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("a bad command line created a directory (%v)", err)
	}
}
