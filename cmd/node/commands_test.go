package main

import (
	"fmt"
	"strings"
	"testing"
)

// goldenUsage is the main usage as main.go wrote it by hand before the
// commands registered themselves, with what commands added since (cluster
// upgrade-check): the registry must print it byte for byte.
const goldenUsage = `usage: baton <command> [flags]

commands:
  agent   run a cluster node (--dev: a single-node cluster on loopback, with
          simulated region servers in the same process)
  regionserver
          run a simulated region server that registers with the masters
  proc    submit, list, watch and control procedures:
          submit TYPE [--arg k=v ...] [--nonce N] [--wait], get ID,
          list [--all], wait ID, abort ID, pause ID, resume ID, ack ID
  cluster status, join --id ID --raft-addr H:P --admin-addr H:P, remove ID,
          maintenance on|off|status, repairs, upgrade-check [--id ID]
  snapshot
          save FILE, inspect FILE, restore FILE
  ns      create NAME, delete NAME, list
  table   create NAME [--regions N], delete|enable|disable|describe NAME, list
          (NAME or NS:NAME; --namespace NS)
  region  list [--table T], move REGION [--to SERVER],
          assign REGION [--server S], unassign REGION
  rs      list (lease state, region count, last heartbeat),
          regions SERVER [--direct ADDR], recover SERVER
  balance even out the region counts of the live region servers
  lock    acquire --kind K --name N [--exclusive] [--keepalive], heartbeat ID,
          release ID
          (commands that start a procedure take --wait)
  repair kit: region assign|unassign [--override], rs recover, proc cancel,
          proc bypass, cluster maintenance, cluster repairs; the commands
          that override the cluster or take a region offline need --yes
          (without it: what they would do, exit 2)
  demo    run crash-proof procedures in this process, on a WAL in a fresh
          temporary directory (or --data-dir DIR); --crash-after N stops the
          process mid-way, and a run with the same --data-dir resumes exactly
          where it stopped
  bench   scale [--regions N,N,...]: start real clusters on this machine and
          print how opening regions, memory, disk, failover, a region
          server crash and a wiped master's catch-up grow with the regions
  tls     ca create, cert create --role master|regionserver|client --id ID:
          a development CA and certificates for --tls-ca/--tls-cert/--tls-key
  acl     whoami, grant CLIENT --permission read|operate|admin, revoke CLIENT,
          token create NAME --permission P, token delete ACCESSOR, list
  audit   list [--principal P] [--method M]: who changed what, and when
  version print the version, the commit it was built from and the Go version

Client commands take --addr (any nodes' admin addresses, comma-separated;
env BATON_ADDR, default 127.0.0.1:7070), --json, and with access control
--tls-* (a client certificate) or --token (env BATON_TOKEN).
Exit codes: 0 ok, 1 failed, 2 bad usage, 3 cluster unavailable.
Run 'baton <command> -h' for the command's flags.
`

// The main usage, built from the registered commands, is exactly the
// golden one wherever it is printed, with the same exit codes.
func TestMainUsageIsGolden(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{args: []string{"-h"}, code: 0, stdout: goldenUsage},
		{args: []string{"--help"}, code: 0, stdout: goldenUsage},
		{args: []string{"help"}, code: 0, stdout: goldenUsage},
		{args: nil, code: 2, stderr: goldenUsage},
		{args: []string{"nosuch"}, code: 2, stderr: "baton: unknown command \"nosuch\"\n\n" + goldenUsage},
	} {
		code, stdout, stderr := runCLI(t, nil, tc.args...)
		if code != tc.code || stdout != tc.stdout || stderr != tc.stderr {
			t.Errorf("baton %q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// Every registered command, under its name and its aliases, answers -h
// with its own usage on stdout and exit 0.
func TestEveryCommandAnswersHelp(t *testing.T) {
	n := 0
	for word, cmd := range topLevel.byWord {
		if cmd == nil {
			continue // a help word
		}
		n++
		code, stdout, stderr := runCLI(t, nil, word, "-h")
		if want := "usage: baton " + cmd.name; code != 0 || stderr != "" || !strings.HasPrefix(stdout, want) {
			t.Errorf("baton %s -h: exit %d, stdout %q, stderr %q; want exit 0 and a usage starting %q", word, code, stdout, stderr, want)
		}
	}
	if n == 0 {
		t.Fatal("no command registered")
	}
}

// A word or a place in the usage taken twice is a programming error: the
// registry panics at init rather than let one command hide another.
func TestRegistryRefusesDuplicates(t *testing.T) {
	run := func(*cli, []string) int { return 0 }
	for _, tc := range []struct {
		name string
		add  func(r *registry)
	}{
		{"name twice", func(r *registry) { r.add(topCommand{name: "x", rank: 2, summary: "s", run: run}) }},
		{"alias taken by a name", func(r *registry) {
			r.add(topCommand{name: "z", aliases: []string{"x"}, rank: 2, summary: "s", run: run})
		}},
		{"name taken by an alias", func(r *registry) { r.add(topCommand{name: "--x", rank: 2, summary: "s", run: run}) }},
		{"a help word", func(r *registry) { r.add(topCommand{name: "help", rank: 2, summary: "s", run: run}) }},
		{"rank twice", func(r *registry) { r.add(topCommand{name: "y", rank: 1, summary: "s", run: run}) }},
		{"a note's rank twice", func(r *registry) { r.note(1, "  a note\n") }},
		{"no run function", func(r *registry) { r.add(topCommand{name: "y", rank: 2, summary: "s"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry()
			r.add(topCommand{name: "x", aliases: []string{"--x"}, rank: 1, summary: "s", run: run})
			defer func() {
				if recover() == nil {
					t.Errorf("registered without a panic")
				}
			}()
			tc.add(r)
		})
	}
}

// A command's summary lines sit in the name column's second half; a name
// wider than the column gets a line of its own.
func TestCommandUsageText(t *testing.T) {
	for _, tc := range []struct {
		cmd  topCommand
		want string
	}{
		{topCommand{name: "ns", summary: "one"}, "  ns      one\n"},
		{topCommand{name: "balance", summary: "one\ntwo"}, "  balance one\n          two\n"},
		{topCommand{name: "regionserver", summary: "one\ntwo"}, "  regionserver\n          one\n          two\n"},
	} {
		if got := tc.cmd.usageText(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.cmd.name, got, tc.want)
		}
	}
	r := newRegistry()
	for i, name := range []string{"b", "a"} {
		r.add(topCommand{name: name, rank: 10 * (2 - i), summary: name, run: func(*cli, []string) int { return 0 }})
	}
	r.note(15, "  note\n")
	want := fmt.Sprintf("%s  a       a\n  note\n  b       b\n%s", usageHead, usageFoot)
	if got := r.usage(); got != want {
		t.Errorf("usage %q, want %q", got, want)
	}
}
