package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/client/clienttest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// runCLI runs a command in-process with env as its environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code = c.run(args)
	return code, out.String(), errb.String()
}

func TestClientCommands(t *testing.T) {
	fc := clienttest.Start(t, 3)
	fc.SetLeader(1)
	addr := "--addr=" + clienttest.DeadAddr(t) + "," + fc.Addrs()[0] // a dead node, then a standby
	fc.Add(&adminpb.Procedure{Id: 100, RootId: 100, Type: "manual", State: "RUNNABLE", WaitingFor: "queued", Children: []uint64{101}})
	fc.Add(&adminpb.Procedure{Id: 101, ParentId: 100, RootId: 100, Type: "manual", State: "SUCCESS", Result: []byte("ok")})
	env := map[string]string{"BATON_ADDR": strings.Join(fc.Addrs(), ",")}

	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		json   map[string]any // expected top-level values in the JSON document
		stdout string         // substring of the human output
		stderr string         // substring of stderr
	}{
		{name: "submit", args: []string{"proc", "submit", "sleep", "--arg", "steps=3", "--nonce", "n1", addr, "--json"}, code: 0, json: map[string]any{"id": 102.0}},
		{name: "submit again same nonce", args: []string{"proc", "submit", "sleep", addr, "--nonce", "n1", "--json"}, code: 0, json: map[string]any{"id": 102.0}},
		{name: "submit human", env: env, args: []string{"proc", "submit", "manual"}, code: 0, stdout: "submitted manual procedure 103"},
		{name: "submit wait success", env: env, args: []string{"proc", "submit", "sleep", "--wait", "--json"}, code: 0, json: map[string]any{"state": "SUCCESS", "type": "sleep", "result": "slept"}},
		{name: "submit wait rolledback", env: env, args: []string{"proc", "submit", "fail", "--wait", "--json"}, code: 1, json: map[string]any{"state": "ROLLEDBACK", "error": "step 1 failed: diagnostic failure"}},
		{name: "submit wait rolledback human", env: env, args: []string{"proc", "submit", "fail", "--wait"}, code: 1, stdout: "ROLLEDBACK", stderr: "ended ROLLEDBACK"},
		{name: "submit unknown type", env: env, args: []string{"proc", "submit", "nope", "--json"}, code: 2, json: map[string]any{"error": map[string]any{"code": "INVALID_ARGUMENT", "message": `unknown procedure type "nope"`, "exit_code": 2.0}}},
		{name: "submit bad arg value", env: env, args: []string{"proc", "submit", "sleep", "--arg", "steps=x"}, code: 2, stderr: "not an integer"},
		{name: "submit malformed arg", env: env, args: []string{"proc", "submit", "sleep", "--arg", "steps"}, code: 2, stderr: "want key=value"},
		{name: "submit duplicate arg", env: env, args: []string{"proc", "submit", "sleep", "--arg", "a=1", "--arg", "a=2"}, code: 2, stderr: "given twice"},
		{name: "submit no type", env: env, args: []string{"proc", "submit"}, code: 2, stderr: "exactly one procedure TYPE"},
		{name: "submit two types", env: env, args: []string{"proc", "submit", "a", "b"}, code: 2, stderr: "exactly one procedure TYPE"},
		{name: "submit unknown flag", env: env, args: []string{"proc", "submit", "sleep", "--bogus"}, code: 2, stderr: "bogus"},
		{name: "get", env: env, args: []string{"proc", "get", "100", "--json"}, code: 0, json: map[string]any{"id": 100.0, "state": "RUNNABLE", "waiting_for": "queued", "children": []any{101.0}, "parent_id": 0.0, "paused": false}},
		{name: "get human", env: env, args: []string{"proc", "get", "101"}, code: 0, stdout: "parent       100"},
		{name: "get not found", env: env, args: []string{"proc", "get", "999", "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": "procedure 999 not found", "exit_code": 1.0}}},
		{name: "get not found human", env: env, args: []string{"proc", "get", "999"}, code: 1, stderr: "node proc list"},
		{name: "get bad id", env: env, args: []string{"proc", "get", "x7"}, code: 2, stderr: "positive integer"},
		{name: "get no id", env: env, args: []string{"proc", "get"}, code: 2, stderr: "exactly one procedure ID"},
		{name: "pause", env: env, args: []string{"proc", "pause", "100", "--json"}, code: 0, json: map[string]any{"paused": true}},
		{name: "resume", env: env, args: []string{"proc", "resume", "100"}, code: 0, stdout: "resumed"},
		{name: "resume not paused", env: env, args: []string{"proc", "resume", "100"}, code: 1, stderr: "node proc get"},
		{name: "abort finished", env: env, args: []string{"proc", "abort", "101", "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "FAILED_PRECONDITION", "message": "procedure 101 is already SUCCESS", "exit_code": 1.0}}},
		{name: "abort", env: env, args: []string{"proc", "abort", "100", "--json"}, code: 0, json: map[string]any{"abort_requested": true}},
		{name: "wait aborted", env: env, args: []string{"proc", "wait", "100", "--json"}, code: 1, json: map[string]any{"state": "ROLLEDBACK", "error": "aborted"}},
		{name: "wait success", env: env, args: []string{"proc", "wait", "101"}, code: 0, stdout: "SUCCESS"},
		{name: "list state", env: env, args: []string{"proc", "list", "--state", "rolledback", "--json"}, code: 0},
		{name: "list human", env: env, args: []string{"proc", "list", "--type", "manual"}, code: 0, stdout: "ID   PARENT"},
		{name: "list none", env: env, args: []string{"proc", "list", "--type", "none"}, code: 0, stdout: "no procedures"},
		{name: "list bad state", env: env, args: []string{"proc", "list", "--state", "DONE"}, code: 2, stderr: "want one of"},
		{name: "list extra arg", env: env, args: []string{"proc", "list", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "proc no command", env: env, args: []string{"proc"}, code: 2, stderr: "usage: node proc"},
		{name: "proc unknown", env: env, args: []string{"proc", "frob"}, code: 2, stderr: "unknown command"},
		{name: "proc help", env: env, args: []string{"proc", "-h"}, code: 0, stdout: "usage: node proc"},
		{name: "submit help", env: env, args: []string{"proc", "submit", "-h"}, code: 0, stderr: "--nonce"},
		{name: "status", env: env, args: []string{"cluster", "status", "--json"}, code: 0, json: map[string]any{"leader_id": "n2", "node_id": "n2", "state": "Leader", "term": 3.0, "commit_index": 42.0}},
		{name: "status human", env: env, args: []string{"cluster", "status"}, code: 0, stdout: "leader       n2"},
		{name: "status extra", env: env, args: []string{"cluster", "status", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "join", env: env, args: []string{"cluster", "join", "--id", "n4", "--raft-addr", "127.0.0.1:17009", "--admin-addr", "127.0.0.1:17010", "--json"}, code: 0, json: map[string]any{"leader_id": "n2"}},
		{name: "join again", env: env, args: []string{"cluster", "join", "--id", "n4", "--raft-addr", "127.0.0.1:17009"}, code: 1, stderr: "already a member"},
		{name: "join missing id", env: env, args: []string{"cluster", "join", "--raft-addr", "127.0.0.1:1"}, code: 2, stderr: "--id and --raft-addr are required"},
		{name: "join bad addr", env: env, args: []string{"cluster", "join", "--id", "x", "--raft-addr", "nope"}, code: 2, stderr: "want host:port"},
		{name: "remove", env: env, args: []string{"cluster", "remove", "n4"}, code: 0, stdout: "n4 removed"},
		{name: "remove unknown", env: env, args: []string{"cluster", "remove", "n4", "--json"}, code: 1, json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": `no member "n4"`, "exit_code": 1.0}}},
		{name: "remove no id", env: env, args: []string{"cluster", "remove"}, code: 2, stderr: "exactly one node ID"},
		{name: "cluster unknown", env: env, args: []string{"cluster", "frob"}, code: 2, stderr: "unknown command"},
		{name: "unavailable", args: []string{"cluster", "status", "--addr", clienttest.DeadAddr(t), "--timeout", "300ms", "--json"}, code: 3, json: map[string]any{"error": map[string]any{"code": "UNAVAILABLE"}}},
		{name: "unavailable human", env: map[string]string{"BATON_ADDR": clienttest.DeadAddr(t)}, args: []string{"proc", "get", "1", "--timeout", "300ms"}, code: 3, stderr: "BATON_ADDR"},
		{name: "empty addr", args: []string{"proc", "get", "1", "--addr", " , "}, code: 2, stderr: "--addr is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if tc.code != 0 && tc.code != 2 || strings.Contains(strings.Join(tc.args, " "), "--json") {
				// Failures explain themselves on stderr.
				if tc.code != 0 && stderr == "" {
					t.Fatal("no message on stderr")
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") && (tc.code != 2 || tc.json != nil) {
				var doc map[string]any
				dec := json.NewDecoder(strings.NewReader(stdout))
				if err := dec.Decode(&doc); err != nil {
					t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
				}
				if dec.More() {
					t.Fatalf("more than one JSON document:\n%s", stdout)
				}
				for k, want := range tc.json {
					if !jsonMatch(doc[k], want) {
						t.Errorf("%s = %#v, want %#v", k, doc[k], want)
					}
				}
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

// jsonMatch compares a decoded JSON value with want, where a map in want
// needs only the keys it lists.
func jsonMatch(got, want any) bool {
	if wm, ok := want.(map[string]any); ok {
		gm, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range wm {
			if !jsonMatch(gm[k], v) {
				return false
			}
		}
		return true
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	return bytes.Equal(gb, wb)
}

func TestListJSONShape(t *testing.T) {
	fc := clienttest.Start(t, 1)
	for i := uint64(1); i <= 150; i++ { // more than one page
		fc.Add(&adminpb.Procedure{Id: i, RootId: i, Type: "sleep", State: "SUCCESS", SubmittedUnixMs: 1700000000000})
	}
	code, stdout, stderr := runCLI(t, nil, "proc", "list", "--addr", fc.Addrs()[0], "--json")
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
	if p["submitted_at"] != "2023-11-14T22:13:20.000Z" {
		t.Errorf("submitted_at %v", p["submitted_at"])
	}
	// An empty list is an empty array, not null.
	code, stdout, _ = runCLI(t, nil, "proc", "list", "--addr", fc.Addrs()[0], "--type", "none", "--json")
	if code != 0 || !strings.Contains(stdout, `"procedures": []`) {
		t.Fatalf("exit %d: %s", code, stdout)
	}
}
