package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
)

// TestSmallerVisible: a lock on a missing region is NOT_FOUND (exit 1)
// with advice about names, not locks; one region is "1 region"; the help
// of proc submit lists the types and their arguments.
func TestSmallerVisible(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	addr := "--addr=" + fc.AdminAddrs()[0]

	code, stdout, stderr := runCLI(t, nil, "lock", "acquire", "--kind", "region", "--name", "nosuch", addr, "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if code != exitFailed || !jsonMatch(doc, map[string]any{"error": map[string]any{"code": "NOT_FOUND", "exit_code": 1.0}}) ||
		!strings.Contains(stderr, `region "nosuch"`) || !strings.Contains(stderr, "baton region list") || strings.Contains(stderr, "no such lock") {
		t.Errorf("lock acquire nosuch: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, nil, "table", "create", "t1", "--regions", "1", "--wait", addr)
	if code != 0 || !strings.Contains(stdout, "(1 region)") || strings.Contains(stdout, "1 regions") {
		t.Fatalf("table create: exit %d\n%s%s", code, stdout, stderr)
	}
	id := regexp.MustCompile(`procedure (\d+)`).FindStringSubmatch(stdout)[1]
	code, stdout, stderr = runCLI(t, nil, "proc", "get", id, addr, "--json")
	if code != 0 || !strings.Contains(stdout, `"result": "table default:t1 created with 1 region"`) {
		t.Errorf("proc get: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, nil, "rs", "regions", "rs1", addr)
	if code != 0 || !strings.Contains(stdout, "hosts 1 region by its own answer; the master assigns it 1 region") {
		t.Errorf("rs regions: exit %d\n%s%s", code, stdout, stderr)
	}

	// Where help goes (stdout or stderr) is not this test's business.
	code, stdout, stderr = runCLI(t, nil, "proc", "submit", "-h")
	help := stdout + stderr
	if code != 0 {
		t.Errorf("proc submit -h: exit %d", code)
	}
	for _, d := range diag.Docs() {
		if !regexp.MustCompile(`(?m)^  ` + d.Name + ` +` + regexp.QuoteMeta(d.Summary) + `$`).MatchString(help) {
			t.Errorf("proc submit -h does not describe %s:\n%s", d.Name, help)
		}
		for _, a := range d.Args {
			if !regexp.MustCompile(`(?m)^    ` + a.Name + ` +.*\(default ` + regexp.QuoteMeta(a.Default) + `\)$`).MatchString(help) {
				t.Errorf("proc submit -h does not describe %s's %s:\n%s", d.Name, a.Name, help)
			}
		}
	}
}
