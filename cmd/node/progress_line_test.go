package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestWaitShowsProgress: --wait says how far a procedure is (steps of a
// sleep, regions open of a table create), names the holder of a lock it
// is blocked on, and a timed-out --json wait carries the procedure's id.
// Off a terminal the progress lines are plain lines.
func TestWaitShowsProgress(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 2})
	cl := fc.Client()
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}

	t.Run("steps of a sleep", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "proc", "submit", "sleep", "--arg", "steps=4", "--arg", "delay=400ms", "--wait")
		if code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		if !regexp.MustCompile(`[0-3] of 4 steps`).MatchString(stdout) {
			t.Fatalf("no progress of the steps on stdout:\n%s", stdout)
		}
		if strings.Contains(stdout, "\r") || strings.Contains(stdout, "\033[") {
			t.Fatalf("terminal control sequences off a terminal:\n%q", stdout)
		}
	})

	t.Run("regions open of a table create", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "table", "create", "tp", "--regions", "40", "--wait")
		if code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, "of 40 regions open") {
			t.Fatalf("no progress of the regions on stdout:\n%s", stdout)
		}
	})

	t.Run("the holder of a blocking lock, and a timed-out wait's id", func(t *testing.T) {
		held, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:tl"}, true, "alice@test", "maintenance", "")
		if err != nil || held.GetState() != client.LockAcquired {
			t.Fatalf("lock: %v %v", held, err)
		}
		defer cl.ReleaseLock(ctxT(t), held.GetLockId())
		code, stdout, stderr := runCLI(t, env, "table", "create", "tl", "--regions", "1", "--wait", "--timeout", "3s", "--json")
		if code != exitUnavailable {
			t.Fatalf("exit %d, want 3 (timed out)\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		want := regexp.MustCompile(`waiting for lock table default:tl \(exclusive\) held by external lock \d+ \(holder alice@test\)`)
		if !want.MatchString(stderr) {
			t.Fatalf("the lock's holder is not named on stderr:\n%s", stderr)
		}
		var doc struct {
			ID    uint64 `json:"id"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.ID == 0 || doc.Error.Code != "DEADLINE_EXCEEDED" {
			t.Fatalf("the --json document of a timed-out wait: %v %+v\n%s", err, doc, stdout)
		}
	})
}

// On a terminal the progress is one line rewritten in place, with the
// reason it waits, and wiped before any other line is printed.
func TestProgressLineOnATerminal(t *testing.T) {
	var out strings.Builder
	l := &progressLine{out: &out, id: 7, terminal: true}
	step := func(done int64, why string) *adminpb.Procedure {
		return &adminpb.Procedure{State: "WAITING", WaitingFor: why, Progress: &adminpb.ProcedureProgress{Done: done, Total: 3, Unit: "steps"}}
	}
	l.show(step(1, "waiting for timer"))
	l.show(step(1, "waiting for timer")) // unchanged: nothing written
	l.show(step(2, "waiting for lock table default:t (exclusive) held by procedure 4 (CreateTable)"))
	l.clear()
	want := "\r\033[K  procedure 7 WAITING: 1 of 3 steps; waiting for timer" +
		"\r\033[K  procedure 7 WAITING: 2 of 3 steps; waiting for lock table default:t (exclusive) held by procedure 4 (CreateTable)" +
		"\r\033[K"
	if out.String() != want {
		t.Fatalf("wrote %q\nwant  %q", out.String(), want)
	}
}

func TestProgressUnitForOne(t *testing.T) {
	for _, c := range []struct {
		n    int64
		unit string
		want string
	}{{1, "regions open", "region open"}, {2, "regions open", "regions open"}, {1, "steps", "step"}, {1, "children done", "child done"}, {0, "steps", "steps"}} {
		if got := unitFor(c.n, c.unit); got != c.want {
			t.Errorf("unitFor(%d, %q) = %q, want %q", c.n, c.unit, got, c.want)
		}
	}
}
