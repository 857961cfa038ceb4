package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/clustertest"
)

// foreignPrefix is a package's name used as a message's prefix: what an
// operator reads should name the object and what is wrong with it, not
// which Go package or layer said so (there is no "master" package).
var foreignPrefix = regexp.MustCompile(`(^|: |\()(procedure|procedures|master|domain|admin|rpc error|security|cluster|client|raftfsm|store|diag|rs|lock|proc cancel|proc bypass|rs recover):\s`)

// checkErrorLines checks each line of a command's stderr: no foreign
// prefix, no prefix said twice.
func checkErrorLines(t *testing.T, args []string, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		msg := strings.TrimSpace(line)
		// "baton table describe: ..." is the command saying it failed.
		if rest, ok := strings.CutPrefix(msg, "baton "+args[0]); ok {
			if i := strings.Index(rest, ": "); i >= 0 {
				msg = rest[i+2:]
			}
		}
		if m := foreignPrefix.FindString(msg); m != "" {
			t.Errorf("%v: %q carries the prefix %q", args, line, strings.TrimSpace(m))
		}
		parts := strings.Split(msg, ": ")
		seen := map[string]bool{}
		for _, p := range parts[:len(parts)-1] {
			if seen[p] {
				t.Errorf("%v: %q says %q twice", args, line, p)
			}
			seen[p] = true
		}
	}
}

// TestErrorMessagesSayOneThing walks the error paths of the commands
// against a live cluster: each failure is one sentence naming the object,
// without another package's prefix or one said twice, and a refusal by the
// cluster prints its code on stderr (the README's promise: scripts need
// not parse messages).
func TestErrorMessagesSayOneThing(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
	if code, _, stderr := runCLI(t, env, "table", "create", "t1", "--wait"); code != 0 {
		t.Fatalf("table create t1: exit %d: %s", code, stderr)
	}
	finished := ""
	if code, stdout, stderr := runCLI(t, env, "proc", "submit", "sleep", "--arg", "steps=0", "--wait", "--json"); code != 0 {
		t.Fatalf("proc submit: exit %d: %s", code, stderr)
	} else if m := regexp.MustCompile(`"id": (\d+)`).FindStringSubmatch(stdout); m != nil {
		finished = m[1]
	} else {
		t.Fatalf("proc submit printed no id: %s", stdout)
	}
	for _, tc := range []struct {
		args []string
		exit int
		code string // printed on stderr; "" for a usage error the CLI finds itself
		says string // what the sentence must name
	}{
		{[]string{"table", "describe", "nosuch"}, 1, "NOT_FOUND", "table default:nosuch does not exist"},
		{[]string{"table", "delete", "nosuch", "--wait"}, 1, "NOT_FOUND", "table default:nosuch does not exist"},
		{[]string{"table", "disable", "nosuch", "--wait"}, 1, "NOT_FOUND", "table default:nosuch does not exist"},
		{[]string{"table", "enable", "nosuch", "--wait"}, 1, "NOT_FOUND", "table default:nosuch does not exist"},
		{[]string{"table", "create", "t1", "--wait"}, 1, "ALREADY_EXISTS", "table default:t1 exists"},
		{[]string{"table", "create", "nons:t5", "--wait"}, 1, "NOT_FOUND", "namespace nons does not exist"},
		{[]string{"table", "delete", "t1", "--wait"}, 1, "FAILED_PRECONDITION", "table default:t1 is ENABLED"},
		{[]string{"table", "create", "表"}, 2, "", "ASCII letters"},
		{[]string{"ns", "get", "nosuch"}, 1, "NOT_FOUND", `namespace "nosuch" does not exist`},
		{[]string{"ns", "delete", "nosuch", "--wait"}, 1, "NOT_FOUND", "namespace nosuch does not exist"},
		{[]string{"ns", "create", "default"}, 2, "INVALID_ARGUMENT", `the "default" namespace is built in`},
		{[]string{"rs", "regions", "rs9"}, 1, "NOT_FOUND", `region server "rs9" is not known`},
		{[]string{"rs", "recover", "rs9", "--yes"}, 1, "NOT_FOUND", `region server "rs9" is not known`},
		{[]string{"proc", "submit", "slep"}, 2, "INVALID_ARGUMENT", `unknown procedure type "slep"`},
		{[]string{"proc", "submit", "sleep", "--arg", "bogus=1"}, 2, "INVALID_ARGUMENT", "bogus"},
		{[]string{"proc", "get", "999999"}, 1, "NOT_FOUND", "procedure 999999 does not exist"},
		{[]string{"proc", "wait", "999999"}, 1, "NOT_FOUND", "procedure 999999 does not exist"},
		{[]string{"proc", "abort", "999999"}, 1, "NOT_FOUND", "procedure 999999 does not exist"},
		{[]string{"proc", "abort", finished}, 1, "FAILED_PRECONDITION", "procedure " + finished + " is already SUCCESS"},
		{[]string{"proc", "bypass", "999999", "--yes"}, 1, "NOT_FOUND", "procedure 999999 does not exist"},
		{[]string{"proc", "cancel", "--state", "SUCCESS", "--yes"}, 2, "", "finished procedures cannot be cancelled"},
		{[]string{"lock", "release", "999999"}, 1, "NOT_FOUND", "999999 does not exist"},
		{[]string{"lock", "acquire", "--kind", "region", "--name", "nosuch", "--", "true"}, 1, "NOT_FOUND", `region "nosuch" does not exist`},
		{[]string{"region", "assign", "nosuch,1,2"}, 1, "NOT_FOUND", `region "nosuch,1,2" does not exist`},
		{[]string{"region", "unassign", "nosuch", "--yes"}, 1, "NOT_FOUND", `region "nosuch" does not exist`},
		{[]string{"region", "move", "nosuch", "--to", "rs1"}, 1, "NOT_FOUND", `region "nosuch" does not exist`},
		{[]string{"table", "create", "t2", "--regions", "1e9"}, 2, "", `--regions "1e9": want a whole number`},
	} {
		code, _, stderr := runCLI(t, env, tc.args...)
		if code != tc.exit {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.exit, stderr)
			continue
		}
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: stderr does not say %q:\n%s", tc.args, tc.says, stderr)
		}
		if tc.code != "" && !strings.Contains(stderr, tc.code) {
			t.Errorf("%v: stderr does not print the code %s:\n%s", tc.args, tc.code, stderr)
		}
		checkErrorLines(t, tc.args, stderr)
	}
}
