package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	semver "github.com/baton-dev/baton/internal/version"
)

// The binary says what it is: its version and the commit it was built
// from, as make build links them in, and its Go version.
func TestVersionOfTheBuiltBinary(t *testing.T) {
	const want = "0123456789abcdef"
	ldflags := "-X main.version=v9.9.9 -X main.commit=" + want // as make build sets them
	bin := buildBaton(t, "-ldflags", ldflags)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("baton %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 3 || lines[0] != "baton v9.9.9" ||
			lines[1] != "commit "+want || lines[2] != runtime.Version() {
			t.Fatalf("baton %v printed\n%s\nwant 'baton v9.9.9', 'commit %s', %q", args, out, want, runtime.Version())
		}
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var b buildInfo
	if err := json.Unmarshal(out, &b); err != nil || b.Version != "v9.9.9" || b.Commit != want || b.GoVersion != runtime.Version() {
		t.Fatalf("version --json = %s (%v)", out, err)
	}
}

// Help asked for goes to stdout with exit 0; a usage error to stderr with
// exit 2; both name every command, the region server's too.
func TestTopLevelHelp(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		toStdout   bool
		mentioning string
	}{
		{args: []string{"-h"}, code: 0, toStdout: true},
		{args: []string{"--help"}, code: 0, toStdout: true},
		{args: []string{"help"}, code: 0, toStdout: true},
		{args: nil, code: 2},
		{args: []string{"nosuch"}, code: 2, mentioning: `unknown command "nosuch"`},
	} {
		code, stdout, stderr := runCLI(t, nil, tc.args...)
		help, other := stderr, stdout
		if tc.toStdout {
			help, other = stdout, stderr
		}
		if code != tc.code || other != "" {
			t.Errorf("baton %v: exit %d, stdout %q, stderr %q", tc.args, code, stdout, stderr)
			continue
		}
		for _, cmd := range []string{"agent", "regionserver", "proc", "cluster", "ns", "table", "region", "rs", "balance", "lock", "demo", "version", tc.mentioning} {
			if cmd != "" && !strings.Contains(help, cmd) {
				t.Errorf("baton %v: help does not mention %q:\n%s", tc.args, cmd, help)
			}
		}
		for _, old := range []string{"usage: node", "'node ", "`node "} {
			if strings.Contains(help, old) {
				t.Errorf("baton %v: help still calls the binary node (%q):\n%s", tc.args, old, help)
			}
		}
	}
}

// A plain build says the release line's pre-release and the format
// levels it writes and reads; the keys 0.1.0 printed stay.
func TestVersionOfAPlainBuild(t *testing.T) {
	b := readBuildInfo()
	if b.Version != semver.Dev || b.Format != semver.MaxFormat || b.MinFormat != semver.MinFormat {
		t.Fatalf("readBuildInfo() = %+v; want version %s, format %d, min_format %d", b, semver.Dev, semver.MaxFormat, semver.MinFormat)
	}
	code, out, _ := runCLI(t, nil, "version", "--json")
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); code != 0 || err != nil {
		t.Fatalf("version --json: exit %d, %q (%v)", code, out, err)
	}
	for k, want := range map[string]any{"version": semver.Dev, "format": float64(semver.MaxFormat), "min_format": float64(semver.MinFormat)} {
		if keys[k] != want {
			t.Errorf("version --json: %s = %v, want %v", k, keys[k], want)
		}
	}
	for _, k := range []string{"commit", "modified", "go_version"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("version --json lost key %q", k)
		}
	}
}
