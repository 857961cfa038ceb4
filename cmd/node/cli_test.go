package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
	semver "github.com/baton-dev/baton/internal/version"
)

// runCLI runs a command in-process with env as its environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code = c.run(args)
	return code, out.String(), errb.String()
}

// ctxT is a context for the test's own calls to the cluster, bounded so
// that a hung call fails the test instead of the whole run.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func idStr(id uint64) string { return strconv.FormatUint(id, 10) }

func TestClientCommands(t *testing.T) {
	// Three masters led by the second, so that the first address the
	// commands try is a standby, which forwards to the leader.
	fc := clustertest.New(t, clustertest.Config{})
	fc.TransferLeadership(1)
	leader := fc.Master(1).ID
	addr := "--addr=" + clustertest.DeadAddr(t) + "," + fc.AdminAddrs()[0] // a dead node, then a standby
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
	cl := fc.Client()

	// A parent waiting for its child, which sleeps for an hour: a tree the
	// rows pause, resume and abort. And a procedure that has finished.
	parent, err := cl.Submit(ctxT(t), "fanout", map[string]string{"children": "1", "steps": "1", "delay": "1h"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var child uint64
	testwait.ForNil(t, 30*time.Second, "the fanout's child", func() error {
		p, err := cl.Get(ctxT(t), parent)
		if err != nil || len(p.GetChildren()) != 1 || p.GetState() != "WAITING" {
			return fmt.Errorf("parent %v, %v", p, err)
		}
		child = p.GetChildren()[0]
		return nil
	})
	finished, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "0"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(ctxT(t), finished); err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("finished: %v %v", p, err)
	}
	P, C, F := idStr(parent), idStr(child), idStr(finished)
	var submitted float64 // the id the first submission printed

	for _, tc := range []cliCase{
		{name: "submit", env: map[string]string{}, args: []string{"proc", "submit", "sleep", "--arg", "steps=3", "--nonce", "n1", addr, "--json"}, json: map[string]any{"id": anID{}},
			then: func(t *testing.T, doc map[string]any, _ string) { submitted, _ = doc["id"].(float64) }},
		{name: "submit again same nonce", env: map[string]string{}, args: []string{"proc", "submit", "sleep", addr, "--nonce", "n1", "--json"},
			then: func(t *testing.T, doc map[string]any, _ string) {
				if doc["id"] != submitted {
					t.Errorf("id %v, want %v (the first submission's)", doc["id"], submitted)
				}
			}},
		{name: "submit human", args: []string{"proc", "submit", "sleep"}, stdout: "submitted sleep procedure ",
			then: func(t *testing.T, _ map[string]any, stdout string) {
				m := regexp.MustCompile(`procedure (\d+)`).FindStringSubmatch(stdout)
				if n, _ := strconv.ParseFloat(m[1], 64); n <= submitted {
					t.Errorf("id %s, want one above %v", m[1], submitted)
				}
			}},
		{name: "submit wait success", args: []string{"proc", "submit", "sleep", "--wait", "--json"}, json: map[string]any{"state": "SUCCESS", "type": "sleep", "result": "slept 3 steps"}},
		{name: "submit wait rolledback", args: []string{"proc", "submit", "fail", "--wait", "--json"}, code: 1, json: map[string]any{"state": "ROLLEDBACK", "error": "diag: failing as asked at step 2 of 3"}},
		{name: "submit wait rolledback human", args: []string{"proc", "submit", "fail", "--wait"}, code: 1, stdout: "ROLLEDBACK", stderr: "ended ROLLEDBACK"},
		{name: "submit unknown type", args: []string{"proc", "submit", "nope", "--json"}, code: 2, json: map[string]any{"error": map[string]any{"code": "INVALID_ARGUMENT", "message": `unknown procedure type "nope" (diagnostic types: fail, fanout, sleep)`, "exit_code": 2.0}}},
		{name: "submit bad arg value", args: []string{"proc", "submit", "sleep", "--arg", "steps=x"}, code: 2, stderr: `steps="x" is not a whole number`},
		{name: "submit malformed arg", args: []string{"proc", "submit", "sleep", "--arg", "steps"}, code: 2, stderr: "want key=value"},
		{name: "submit duplicate arg", args: []string{"proc", "submit", "sleep", "--arg", "a=1", "--arg", "a=2"}, code: 2, stderr: "given twice"},
		{name: "submit no type", args: []string{"proc", "submit"}, code: 2, stderr: "exactly one procedure TYPE"},
		{name: "submit two types", args: []string{"proc", "submit", "a", "b"}, code: 2, stderr: "exactly one procedure TYPE"},
		{name: "submit unknown flag", args: []string{"proc", "submit", "sleep", "--bogus"}, code: 2, stderr: "bogus"},
		{name: "get", args: []string{"proc", "get", P, "--json"}, json: map[string]any{"id": float64(parent), "state": "WAITING", "waiting_for": "waiting for children", "children": []any{float64(child)}, "parent_id": 0.0, "paused": false}},
		{name: "get human", args: []string{"proc", "get", C}, stdout: "parent       " + P},
		{name: "get not found", args: []string{"proc", "get", "999999", "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": "procedure 999999 does not exist", "exit_code": 1.0}}},
		{name: "get not found human", args: []string{"proc", "get", "999999"}, code: 1, stderr: "baton proc list"},
		{name: "get bad id", args: []string{"proc", "get", "x7"}, code: 2, stderr: "positive integer"},
		{name: "get no id", args: []string{"proc", "get"}, code: 2, stderr: "exactly one procedure ID"},
		{name: "pause", args: []string{"proc", "pause", P, "--json"}, json: map[string]any{"paused": true}},
		{name: "resume", args: []string{"proc", "resume", P}, stdout: "resumed"},
		// Resuming is idempotent on the master: no error for a procedure
		// that is not paused.
		{name: "resume not paused", args: []string{"proc", "resume", P, "--json"}, json: map[string]any{"id": float64(parent), "paused": false}},
		{name: "abort finished", args: []string{"proc", "abort", F, "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "FAILED_PRECONDITION", "message": "procedure " + F + " is already SUCCESS", "exit_code": 1.0}}},
		{name: "abort", args: []string{"proc", "abort", P, "--json"}, json: map[string]any{"abort_requested": true}},
		{name: "wait aborted", args: []string{"proc", "wait", P, "--json"}, code: 1, json: map[string]any{"state": "ROLLEDBACK", "error": "proc " + C + " (sleep): procedure: aborted"}},
		{name: "wait success", args: []string{"proc", "wait", F}, stdout: "SUCCESS"},
		{name: "list state", args: []string{"proc", "list", "--state", "rolledback", "--json"}},
		{name: "list human", args: []string{"proc", "list", "--type", "sleep"}, stdout: "ID  PARENT  TYPE"},
		{name: "list none", args: []string{"proc", "list", "--type", "none"}, stdout: "no procedures"},
		{name: "list bad state", args: []string{"proc", "list", "--state", "DONE"}, code: 2, stderr: "want one of"},
		{name: "list extra arg", args: []string{"proc", "list", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "proc no command", args: []string{"proc"}, code: 2, stderr: "usage: baton proc"},
		{name: "proc unknown", args: []string{"proc", "frob"}, code: 2, stderr: "unknown command"},
		{name: "proc help", args: []string{"proc", "-h"}, stdout: "usage: baton proc"},
		{name: "submit help", args: []string{"proc", "submit", "-h"}, stdout: "--nonce"},
		// The first address is a standby, which answers with its own view
		// (node_id, state), naming the leader.
		{name: "status", args: []string{"cluster", "status", "--json"}, json: map[string]any{"leader_id": leader, "node_id": fc.Master(0).ID, "state": "Follower", "term": anID{}, "commit_index": anID{}}},
		{name: "status human", args: []string{"cluster", "status"}, stdout: "leader       " + leader},
		{name: "status versions", args: []string{"cluster", "status", "--json"}, json: map[string]any{"version": semver.Dev, "max_format": float64(semver.MaxFormat), "cluster_format": anID{}}},
		{name: "status versions human", args: []string{"cluster", "status"}, stdout: "version      cluster at format "},
		{name: "status extra", args: []string{"cluster", "status", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "join", args: []string{"cluster", "join", "--id", "n4", "--raft-addr", "127.0.0.1:17009", "--admin-addr", "127.0.0.1:17010", "--json"}, json: map[string]any{"leader_id": leader}},
		// Joining again with the same address is a no-op that succeeds, so
		// that a node retrying its join is not refused.
		{name: "join again", args: []string{"cluster", "join", "--id", "n4", "--raft-addr", "127.0.0.1:17009"}, stdout: "n4 joined the cluster"},
		{name: "join missing id", args: []string{"cluster", "join", "--raft-addr", "127.0.0.1:1"}, code: 2, stderr: "--id and --raft-addr are required"},
		{name: "join bad addr", args: []string{"cluster", "join", "--id", "x", "--raft-addr", "nope"}, code: 2, stderr: "want host:port"},
		// Destructive: without --yes it says what it would do, exit 2.
		{name: "remove unconfirmed", args: []string{"cluster", "remove", "n4"}, code: 2, stdout: "dry run: would remove n4 from the cluster", stderr: "add --yes"},
		{name: "remove unconfirmed json", args: []string{"cluster", "remove", "n4", "--json"}, code: 2, json: map[string]any{"dry_run": true, "confirm": "add --yes to do it", "exit_code": 2.0}},
		{name: "remove", args: []string{"cluster", "remove", "n4", "--yes"}, stdout: "n4 removed"},
		// The retry of a removal (its answer lost) succeeds: the member is
		// gone, as asked.
		{name: "remove again", args: []string{"cluster", "remove", "n4", "--yes", "--json"}, json: map[string]any{"already_removed": true, "removed": false}},
		{name: "remove again human", args: []string{"cluster", "remove", "n4", "--yes"}, stdout: "n4 is not a member of the cluster: an earlier removal took it out"},
		// A node that never was a member is NOT_FOUND (exit 1), not a
		// silent success: a typo must not look like a removal.
		{name: "remove unknown", args: []string{"cluster", "remove", "nosuch", "--yes", "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "exit_code": 1.0}}},
		{name: "remove unknown human", args: []string{"cluster", "remove", "nosuch", "--yes"}, code: 1, stderr: `remove "nosuch": cluster: no such member`},
		{name: "remove no id", args: []string{"cluster", "remove"}, code: 2, stderr: "exactly one node ID"},
		{name: "cluster unknown", args: []string{"cluster", "frob"}, code: 2, stderr: "unknown command"},
		{name: "unavailable", env: map[string]string{}, args: []string{"cluster", "status", "--addr", clustertest.DeadAddr(t), "--timeout", "300ms", "--json"}, code: 3, json: map[string]any{"error": map[string]any{"code": "UNAVAILABLE"}}},
		{name: "unavailable human", env: map[string]string{"BATON_ADDR": clustertest.DeadAddr(t)}, args: []string{"proc", "get", "1", "--timeout", "300ms"}, code: 3, stderr: "BATON_ADDR"},
		{name: "empty addr", env: map[string]string{}, args: []string{"proc", "get", "1", "--addr", " , "}, code: 2, stderr: "--addr is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, env) })
	}
}

func TestListJSONShape(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	cl := fc.Client()
	for range 150 { // more than one page
		if _, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "0"}, "", "", 0); err != nil {
			t.Fatal(err)
		}
	}
	addr := fc.AdminAddrs()[0]
	code, stdout, stderr := runCLI(t, nil, "proc", "list", "--addr", addr, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Procedures []map[string]any `json:"procedures"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Procedures) != 150 {
		t.Fatalf("%d procedures, want 150", len(doc.Procedures))
	}
	p := doc.Procedures[0]
	for _, k := range []string{"id", "parent_id", "root_id", "type", "state", "owner", "nonce", "submitted_at", "updated_at", "paused", "abort_requested", "children"} {
		if _, ok := p[k]; !ok {
			t.Errorf("key %q missing from %v", k, p)
		}
	}
	// UTC, to the millisecond, whatever the time of the submission.
	if s, _ := p["submitted_at"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(s) {
		t.Errorf("submitted_at %v", p["submitted_at"])
	}
	// An empty list is an empty array, not null.
	code, stdout, _ = runCLI(t, nil, "proc", "list", "--addr", addr, "--type", "none", "--json")
	if code != 0 || !strings.Contains(stdout, `"procedures": []`) {
		t.Fatalf("exit %d: %s", code, stdout)
	}
}

// TestRefusedBeforeSending: a malformed --addr and a name the masters would
// refuse fail at once as usage errors (exit 2, naming what is wrong), before
// anything is sent: the cluster named by BATON_ADDR is dead, so a command
// that tried it would exit 3 instead.
func TestRefusedBeforeSending(t *testing.T) {
	dead := map[string]string{"BATON_ADDR": clustertest.DeadAddr(t)}
	long := strings.Repeat("t", 129)
	for _, tc := range []cliCase{
		{name: "addr not an address", args: []string{"cluster", "status", "--addr", "notanaddress"}, code: 2, stderr: `--addr "notanaddress": want host:port`},
		{name: "addr bad port", args: []string{"proc", "list", "--addr", "127.0.0.1:7070,127.0.0.1:99999"}, code: 2, stderr: `--addr "127.0.0.1:99999": the port must be`},
		{name: "env addr", env: map[string]string{"BATON_ADDR": "nohost"}, args: []string{"proc", "get", "1"}, code: 2, stderr: `BATON_ADDR "nohost": want host:port`},
		{name: "namespace charset", args: []string{"ns", "create", "a b", "--timeout", "300ms"}, code: 2, stderr: `namespace name "a b": character ' ' not allowed`},
		{name: "namespace get charset", args: []string{"ns", "get", "a/b", "--timeout", "300ms"}, code: 2, stderr: `namespace name "a/b"`},
		{name: "table too long", args: []string{"table", "create", long, "--timeout", "300ms"}, code: 2, stderr: "longer than 128"},
		{name: "table charset", args: []string{"table", "delete", "ns1:a,b", "--timeout", "300ms"}, code: 2, stderr: `table name "a,b": character ',' not allowed`},
		{name: "table namespace flag", args: []string{"table", "create", "t1", "--namespace", "x:y", "--timeout", "300ms"}, code: 2, stderr: `namespace`},
		{name: "table list namespace", args: []string{"table", "list", "--namespace", "x y", "--timeout", "300ms"}, code: 2, stderr: `namespace name "x y"`},
		{name: "lock namespace", args: []string{"lock", "acquire", "--kind", "namespace", "--name", "a b", "--timeout", "300ms"}, code: 2, stderr: `namespace name "a b"`},
		{name: "lock table", args: []string{"lock", "acquire", "--kind", "table", "--name", long, "--timeout", "300ms"}, code: 2, stderr: "longer than 128"},
		// 128 characters is a valid name: it reaches the (dead) cluster.
		{name: "table 128 is fine", args: []string{"table", "create", long[1:], "--timeout", "300ms"}, code: 3, stderr: "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, dead)
			env := dead
			if tc.env != nil {
				env = tc.env
			}
			if _, stdout, _ := runCLI(t, env, tc.args...); tc.code == exitUsage && stdout != "" {
				t.Errorf("echoed before refusing: %q", stdout)
			}
		})
	}
}
