package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestFinishedTreeKeepsChildSummaries: once a fanout has finished, its
// children's records are gone, but the operator still sees the tree for
// as long as the root is kept: proc get of a child answers from the
// summary the root's record keeps (SUCCESS, its parent), proc list --all
// lists the three with their parent, proc get of the root lists them, and
// a standby answers the same with --stale.
func TestFinishedTreeKeepsChildSummaries(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{})
	fc.TransferLeadership(1)
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}

	code, stdout, stderr := runCLI(t, env, "proc", "submit", "fanout", "--arg", "children=3", "--arg", "steps=1", "--arg", "delay=1ms", "--wait", "--json")
	if code != 0 {
		t.Fatalf("submit --wait: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var root struct {
		ID       uint64   `json:"id"`
		State    string   `json:"state"`
		Children []uint64 `json:"children"`
	}
	if err := json.Unmarshal([]byte(stdout), &root); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if root.State != "SUCCESS" || len(root.Children) != 3 {
		t.Fatalf("root %+v: want SUCCESS with 3 children", root)
	}
	R := idStr(root.ID)

	for _, c := range root.Children {
		code, stdout, stderr := runCLI(t, env, "proc", "get", idStr(c))
		if code != 0 {
			t.Fatalf("proc get %d (a finished fanout's child): exit %d\n%s%s", c, code, stdout, stderr)
		}
		for _, want := range []string{"state        SUCCESS", "parent       " + R, "type         sleep", "kept         a summary"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("proc get %d: no %q in\n%s", c, want, stdout)
			}
		}
		code, stdout, stderr = runCLI(t, env, "proc", "get", idStr(c), "--json")
		if code != 0 {
			t.Fatalf("proc get %d --json: exit %d: %s", c, code, stderr)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		for k, want := range map[string]any{"id": float64(c), "parent_id": float64(root.ID), "root_id": float64(root.ID),
			"state": "SUCCESS", "type": "sleep", "summary_only": true} {
			if doc[k] != want {
				t.Errorf("proc get %d --json: %q = %v, want %v (%s)", c, k, doc[k], want, stdout)
			}
		}
		for _, k := range []string{"submitted_at", "finished_at"} {
			if s, _ := doc[k].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT`).MatchString(s) {
				t.Errorf("proc get %d --json: %q = %v", c, k, doc[k])
			}
		}
	}

	code, stdout, stderr = runCLI(t, env, "proc", "list", "--all", "--json")
	if code != 0 {
		t.Fatalf("proc list --all: exit %d: %s", code, stderr)
	}
	var list struct {
		Procedures []struct {
			ID          uint64 `json:"id"`
			ParentID    uint64 `json:"parent_id"`
			State       string `json:"state"`
			SummaryOnly bool   `json:"summary_only"`
		} `json:"procedures"`
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	var listed []uint64
	for _, p := range list.Procedures {
		if p.ParentID == root.ID {
			if p.State != "SUCCESS" || !p.SummaryOnly {
				t.Errorf("listed child %+v", p)
			}
			listed = append(listed, p.ID)
		}
	}
	if fmt.Sprint(listed) != fmt.Sprint(root.Children) {
		t.Fatalf("proc list --all lists children %v of %d, want %v:\n%s", listed, root.ID, root.Children, stdout)
	}
	code, stdout, _ = runCLI(t, env, "proc", "list", "--all")
	for _, c := range root.Children {
		if code != 0 || !regexp.MustCompile(`(?m)^`+idStr(c)+`\s+`+R+`\s+sleep\s+SUCCESS`).MatchString(stdout) {
			t.Fatalf("proc list --all: exit %d, no row of child %d under %s:\n%s", code, c, R, stdout)
		}
	}

	code, stdout, stderr = runCLI(t, env, "proc", "get", R)
	for _, c := range root.Children {
		if code != 0 || !regexp.MustCompile(`(?m)^`+idStr(c)+`\s+sleep\s+SUCCESS`).MatchString(stdout) {
			t.Fatalf("proc get %s: exit %d, child %d not in its table:\n%s%s", R, code, c, stdout, stderr)
		}
	}

	// A standby, which has no executor, answers a stale read from the
	// root's record in its own copy of the state.
	standby := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	c := idStr(root.Children[1])
	testwait.ForNil(t, 30*time.Second, "a stale proc get of a child on a standby", func() error {
		code, stdout, stderr := runCLI(t, standby, "proc", "get", c, "--stale", "--json")
		if code != 0 || !strings.Contains(stdout, `"summary_only": true`) || !strings.Contains(stdout, `"state": "SUCCESS"`) {
			return fmt.Errorf("exit %d: %s%s", code, stdout, stderr)
		}
		return nil
	})
	code, stdout, stderr = runCLI(t, standby, "proc", "list", "--all", "--stale")
	if code != 0 || !regexp.MustCompile(`(?m)^`+c+`\s+`+R+`\s+sleep\s+SUCCESS`).MatchString(stdout) {
		t.Fatalf("stale proc list --all on a standby: exit %d\n%s%s", code, stdout, stderr)
	}
}
