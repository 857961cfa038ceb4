package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildBaton builds this command, with flags for go build, into a
// directory of t's and returns the binary's path: for the tests that run
// it as a user would, as a process of its own. Skipped in -short.
func buildBaton(t *testing.T, flags ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "baton")
	args := append(append([]string{"build"}, flags...), "-o", bin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"demo", "extra"}, {"demo", "--crash-after", "-1"}, {"demo", "--nope"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errb.Len() == 0 {
			t.Errorf("%v: no message on stderr", args)
		}
	}
}

func TestDemoJSON(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--data-dir", dir, "--step-delay", "0s", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc struct {
		Procedures []demoResult `json:"procedures"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(doc.Procedures) != 2 || doc.Procedures[0].State != "SUCCESS" || doc.Procedures[1].State != "ROLLEDBACK" {
		t.Fatalf("%+v", doc.Procedures)
	}
	// Again: the nonces map to the same, finished procedures.
	out.Reset()
	if code := run([]string{"demo", "--data-dir", dir, "--step-delay", "0s", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("second run exit %d", code)
	}
	var again struct {
		Procedures []demoResult `json:"procedures"`
	}
	_ = json.Unmarshal(out.Bytes(), &again)
	if again.Procedures[0].ID != doc.Procedures[0].ID || again.Procedures[1].ID != doc.Procedures[1].ID {
		t.Fatalf("ids changed across runs: %+v then %+v", doc.Procedures, again.Procedures)
	}
}

// TestDemoResumesAfterCrash runs the binary, which exits abruptly mid-way,
// then again, and checks the second run finished what the first started.
func TestDemoResumesAfterCrash(t *testing.T) {
	bin := buildBaton(t)
	dir := t.TempDir()
	first := exec.Command(bin, "demo", "--data-dir", dir, "--step-delay", "0s", "--crash-after", "7")
	out, err := first.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "simulated crash") {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	second := exec.Command(bin, "demo", "--data-dir", dir, "--step-delay", "0s", "--json")
	second.Stderr = os.Stderr
	out, err = second.Output()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	var doc struct {
		Procedures []demoResult `json:"procedures"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Procedures {
		if !p.Resumed {
			t.Errorf("%s was not resumed from the first run: %+v", p.Name, p)
		}
	}
	if doc.Procedures[0].State != "SUCCESS" || doc.Procedures[1].State != "ROLLEDBACK" {
		t.Fatalf("%+v", doc.Procedures)
	}
}
