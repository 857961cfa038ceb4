package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
)

// After the leader is killed mid-way, proc get shows which master ran
// which of the procedure's writes: the README's failover walkthrough
// points at this.
func TestProcGetShowsWhichMasterRanIt(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{})
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
	code, stdout, stderr := runCLI(t, env, "proc", "submit", "sleep", "--arg", "steps=200", "--arg", "delay=10ms", "--json")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, stderr)
	}
	var sub struct {
		ID uint64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(stdout), &sub); err != nil {
		t.Fatal(err)
	}
	id := idStr(sub.ID)
	getJSON := func() procJSON {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, "proc", "get", id, "--json")
		if code != 0 {
			t.Fatalf("proc get: exit %d: %s", code, stderr)
		}
		var j procJSON
		if err := json.Unmarshal([]byte(stdout), &j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	var first string
	testwait.For(t, 30*time.Second, "a few steps written by the first leader", func() bool {
		j := getJSON()
		if len(j.Runs) == 1 && j.Runs[0].LastWrite >= 3 {
			first = j.Runs[0].Node
			return true
		}
		return false
	})
	for i := range fc.Masters() {
		if fc.Master(i).ID == first {
			fc.Kill(i) // the master that has been running it
		}
	}
	code, _, stderr = runCLI(t, env, "proc", "wait", id, "--timeout", "60s")
	if code != 0 {
		t.Fatalf("proc wait: exit %d: %s", code, stderr)
	}
	j := getJSON()
	if len(j.Runs) < 2 || j.Runs[0].Node != first || j.Runs[len(j.Runs)-1].Node == first {
		t.Fatalf("runs %+v: want %s first, then the new leader", j.Runs, first)
	}
	for i := 1; i < len(j.Runs); i++ {
		if j.Runs[i].FirstWrite != j.Runs[i-1].LastWrite+1 {
			t.Fatalf("runs %+v: writes not numbered on from one run to the next", j.Runs)
		}
	}
	code, stdout, _ = runCLI(t, env, "proc", "get", id)
	if code != 0 || !strings.Contains(stdout, "ran on       "+first+": writes 1-") {
		t.Fatalf("proc get (exit %d) does not say where it ran:\n%s", code, stdout)
	}
	if last := j.Runs[len(j.Runs)-1]; !strings.Contains(stdout, last.Node+": writes") {
		t.Fatalf("proc get does not name the new leader %s:\n%s", last.Node, stdout)
	}
	// The timeline shows the same move: --json's history and --history's
	// rows, the new leader's first one marked.
	if j.History == nil || len(*j.History) < 2 {
		t.Fatalf("proc get --json: history %v, want the timeline", j.History)
	}
	h := *j.History
	newLeader := j.Runs[len(j.Runs)-1].Node
	if h[0].Node != first || h[len(h)-1].Node != newLeader || h[len(h)-1].State != "SUCCESS" {
		t.Fatalf("history %+v: want %s first and %s last, ending SUCCESS", h, first, newLeader)
	}
	code, stdout, _ = runCLI(t, env, "proc", "get", id, "--history")
	if code != 0 || !strings.Contains(stdout, "WRITES") || !strings.Contains(stdout, "now on "+newLeader) {
		t.Fatalf("proc get --history (exit %d) does not show the move to %s:\n%s", code, newLeader, stdout)
	}
}
