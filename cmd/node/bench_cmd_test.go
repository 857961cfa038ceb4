package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/client"
)

func TestBenchScaleBadFlags(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--regions", "ten"}, `--regions: "ten" is not a positive number`},
		{[]string{"--regions", ""}, "--regions is empty"},
		{[]string{"--table-regions", strconv.Itoa(client.MaxRegions + 1)}, fmt.Sprintf("--table-regions %d: want 1 to %d", client.MaxRegions+1, client.MaxRegions)},
		{[]string{"--regionservers", "1"}, "--regionservers 1: want at least 2"},
		{[]string{"--skip", "open"}, `--skip: unknown phase "open"`},
		{[]string{"--phase-timeout", "0s"}, "--phase-timeout 0s"},
		{[]string{"extra"}, "takes no arguments"},
		{[]string{"--workers", "-1"}, "--workers -1: want 1 to 4096"},
		{[]string{"--profile", t.TempDir(), "--profile-seconds", "0"}, "--profile-seconds 0: want at least 1"},
		{[]string{"--profile", filepath.Join(notDir, "profiles")}, "--profile: mkdir"},
		{[]string{"--tls", "yes"}, `--tls "yes": want off, on or both`},
		{[]string{"--shape", "10x"}, `--shape: shape "10x": want TABLESxREGIONS`},
		{[]string{"--shape", "0x100"}, `--shape: shape "0x100"`},
		{[]string{"--shape", "1x" + strconv.Itoa(client.MaxRegions+1)}, fmt.Sprintf("regions per table: want at most %d", client.MaxRegions)},
		{[]string{"--shape", "10x10", "--regions", "100"}, "leave out --regions and --table-regions"},
		{[]string{"--submit", "later"}, `--submit "later": want all or wait`},
		{[]string{"--shape", "standard", "--rounds", "0"}, "--rounds 0: want 1 to 20"},
		{[]string{"--shape", "standard", "--rounds", "21"}, "--rounds 21: want 1 to 20"},
		{[]string{"--rounds", "3"}, "--rounds 3: rounds compare shapes, give --shape"},
		{[]string{"--shape", "10x10", "--rounds", "3"}, "--rounds 3: rounds compare shapes, give --shape with at least two"},
		{[]string{"--shape", "10x10,1x100,10x10"}, "--shape 10x10 named twice"},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"bench", "scale"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench scale %q: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	// Valid flags, from a test binary: refused before anything starts.
	if code, _, stderr := runCLI(t, nil, "bench", "scale", "--regions", "10"); code != exitFailed || !strings.Contains(stderr, "is a test binary") {
		t.Errorf("bench scale from a test binary: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCLI(t, nil, "bench", "scale", "-h"); code != exitOK || !strings.Contains(stdout, "--table-regions") {
		t.Errorf("bench scale -h: exit %d, stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "bench", "sclae"); code != exitUsage || !strings.Contains(stderr, `unknown command "sclae"`) {
		t.Errorf("bench sclae: exit %d, stderr %q", code, stderr)
	}
}

func TestBenchReadsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--callers", "0"}, "--callers 0: want 1 to 4096"},
		{[]string{"--rounds", "3"}, "--rounds 3: want an even count"},
		{[]string{"--calls", "1"}, "--calls 1: want at least one a round (4)"},
		{[]string{"--kinds", "stale,fast"}, `--kinds: unknown kind "fast"`},
		{[]string{"--kinds", "stale,stale"}, `--kinds: kind "stale" named twice`},
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"extra"}, "takes no arguments"},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"bench", "reads"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench reads %q: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if code, _, stderr := runCLI(t, nil, "bench", "reads", "--calls", "10"); code != exitFailed || !strings.Contains(stderr, "is a test binary") {
		t.Errorf("bench reads from a test binary: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCLI(t, nil, "bench", "reads", "-h"); code != exitOK || !strings.Contains(stdout, "-callers int") {
		t.Errorf("bench reads -h: exit %d, stdout %q", code, stdout)
	}
}

// --shape replaces the rows of --regions; "standard" is issue 33's three.
func TestBenchScaleShapes(t *testing.T) {
	c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	o, err := parseScaleFlags(c, []string{"--shape", "standard"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sh := range o.Shapes {
		got = append(got, fmt.Sprintf("%s=%d", sh, sh.Regions))
	}
	if want := "10x10000=100000 50x2000=100000 1000x100=100000"; strings.Join(got, " ") != want {
		t.Errorf("--shape standard: %s, want %s", strings.Join(got, " "), want)
	}
	if o.Submit != "all" {
		t.Errorf("--submit defaults to %q, want all", o.Submit)
	}
	if o.Rounds != 1 {
		t.Errorf("--rounds defaults to %d, want 1", o.Rounds)
	}
	if o, err := parseScaleFlags(c, []string{"--shape", "standard", "--rounds", "3"}); err != nil || o.Rounds != 3 {
		t.Errorf("--shape standard --rounds 3: rounds %d, %v", o.Rounds, err)
	}
	o, err = parseScaleFlags(c, []string{"--shape", " 3x7 ,2x1", "--submit", "wait"})
	if err != nil || len(o.Shapes) != 2 || o.Shapes[0].Regions != 21 || o.Shapes[0].TableRegions != 7 || o.Shapes[1].String() != "2x1" || o.Submit != "wait" {
		t.Errorf("--shape ' 3x7 ,2x1' --submit wait: %+v, %v", o.ScaleOptions, err)
	}
}

// The commit sweep and the snapshot phase are opt-in; --skip names them
// like the others.
func TestBenchScaleOptInPhases(t *testing.T) {
	c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	for _, tc := range []struct {
		args                 []string
		skipCommit, skipSnap bool
	}{
		{nil, true, true},
		{[]string{"--snapshot"}, true, false},
		{[]string{"--commit", "--snapshot"}, false, false},
		{[]string{"--snapshot", "--skip", "snapshot,failover"}, true, true},
	} {
		o, err := parseScaleFlags(c, tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if o.Skip["commit"] != tc.skipCommit || o.Skip["snapshot"] != tc.skipSnap {
			t.Errorf("%q: skip %v, want commit %v, snapshot %v", tc.args, o.Skip, tc.skipCommit, tc.skipSnap)
		}
	}
}
