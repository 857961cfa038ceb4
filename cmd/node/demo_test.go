package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type demoDoc struct {
	Procedures   []demoResult `json:"procedures"`
	DataDir      string       `json:"data_dir"`
	FreshDataDir bool         `json:"fresh_data_dir"`
}

// TestDemoStartsFresh: without --data-dir every run starts from a new
// directory, says which, and removes it; nothing is resumed from the last.
func TestDemoStartsFresh(t *testing.T) {
	var dirs []string
	for range 2 {
		var out, errb bytes.Buffer
		if code := run([]string{"demo", "--step-delay", "0s", "--json"}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var doc demoDoc
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if !doc.FreshDataDir || doc.DataDir == "" || doc.DataDir == "./baton-data" {
			t.Fatalf("data_dir %q fresh %v", doc.DataDir, doc.FreshDataDir)
		}
		for _, p := range doc.Procedures {
			if p.Resumed {
				t.Errorf("%s resumed in a fresh directory", p.Name)
			}
		}
		if _, err := os.Stat(doc.DataDir); !os.IsNotExist(err) {
			t.Errorf("%s still there after the run: %v", doc.DataDir, err)
		}
		dirs = append(dirs, doc.DataDir)
	}
	if dirs[0] == dirs[1] {
		t.Fatalf("both runs used %s", dirs[0])
	}
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--step-delay", "0s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"data directory ", "(fresh; --data-dir DIR keeps one across runs)", "removed. With --data-dir DIR"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	out.Reset()
	if code := run([]string{"demo", "--step-delay", "0s", "--data-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "data directory "+dir+" (given") {
		t.Errorf("output does not name the given directory:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); err != nil {
		t.Errorf("the given directory's WAL: %v", err)
	}
}

// TestDemoCrashNamesItsDirectory: a crashed run without --data-dir keeps
// its fresh directory and says how to resume it; doing so resumes.
func TestDemoCrashNamesItsDirectory(t *testing.T) {
	bin := buildBaton(t)
	out, err := exec.Command(bin, "demo", "--step-delay", "0s", "--crash-after", "7").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`to resume: baton demo --data-dir (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the crash does not say how to resume:\n%s", out)
	}
	dir := string(m[1])
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	second := exec.Command(bin, "demo", "--data-dir", dir, "--step-delay", "0s", "--json")
	second.Stderr = os.Stderr
	out, err = second.Output()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	var doc demoDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.FreshDataDir || doc.DataDir != dir {
		t.Errorf("data_dir %q fresh %v, want %q given", doc.DataDir, doc.FreshDataDir, dir)
	}
	for _, p := range doc.Procedures {
		if !p.Resumed {
			t.Errorf("%s was not resumed: %+v", p.Name, p)
		}
	}
}
