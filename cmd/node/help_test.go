package main

import (
	"strings"
	"testing"
)

// Help that was asked for goes to stdout with exit 0; the same usage
// printed because of a mistake goes to stderr with exit 2. For every
// command with flags.
func TestCommandHelpGoesWhereItBelongs(t *testing.T) {
	for _, cmd := range [][]string{
		{"agent"}, {"regionserver"}, {"demo"},
		{"proc", "submit"}, {"proc", "get"}, {"proc", "list"}, {"proc", "wait"},
		{"cluster", "status"}, {"cluster", "remove"},
		{"ns", "create"}, {"table", "create"}, {"table", "list"}, {"region", "move"},
		{"rs", "list"}, {"rs", "regions"}, {"balance"}, {"lock", "acquire"},
		{"region", "assign"}, {"region", "unassign"}, {"rs", "recover"}, {"proc", "cancel"}, {"proc", "bypass"},
		{"cluster", "maintenance", "on"}, {"cluster", "maintenance", "off"}, {"cluster", "maintenance", "status"}, {"cluster", "repairs"},
		{"cluster", "upgrade-check"},
	} {
		name := strings.Join(cmd, " ")
		code, stdout, stderr := runCLI(t, nil, append(append([]string(nil), cmd...), "-h")...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: baton "+name) {
			t.Errorf("baton %s -h: exit %d, stdout %q, stderr %q; want the usage on stdout, exit 0", name, code, stdout, stderr)
		}
		code, stdout, stderr = runCLI(t, nil, append(append([]string(nil), cmd...), "--no-such-flag")...)
		// A mistake is said in one line, with the way to the help: the
		// whole usage would bury it.
		want := "baton " + name + ": unknown flag --no-such-flag\nrun 'baton " + name + " -h' for usage\n"
		if code != 2 || stdout != "" || stderr != want {
			t.Errorf("baton %s --no-such-flag: exit %d, stdout %q, stderr %q; want exactly %q, exit 2", name, code, stdout, stderr, want)
		}
	}
}
