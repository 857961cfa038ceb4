package integration

import (
	"strings"
	"testing"
)

// The checks TestReadme makes of a line are only as good as their reading
// of the README's comments, so that reading is pinned here without
// starting any process.
func TestReadmeLineChecks(t *testing.T) {
	for _, tc := range []struct {
		comment        string
		rc             int
		stdout, stderr string
		fail           string // substring of the failure; "" passes
	}{
		{"SUCCESS", 0, "state SUCCESS", "", ""},
		{"SUCCESS", 0, "state FAILED", "", "lacks SUCCESS"},
		{"ROLLEDBACK, exit code 1", 1, "", "ended ROLLEDBACK", ""},
		{"ROLLEDBACK, exit code 1", 0, "ROLLEDBACK", "", "exit code 0, want 1"},
		{"note the leader, then kill it:", 0, "", "", ""},
		{"", 3, "", "", "exit code 3, want 0"},
		{`{"id": 3}`, 0, `{"id": 3, "x": 1}`, "", ""},
		{`{"id": 3}`, 0, `{"id": 4}`, "", "got 4"},
		{`{"name": "ns1", "read": {"served_by": "n1", "applied_index": 42, ...}}`, 0,
			`{"name": "ns1", "read": {"served_by": "dev", "applied_index": 7}}`, "", ""},
		{`{"name": "ns1", "read": {"served_by": "n1", ...}}`, 0, `{"name": "ns1"}`, "", ".read missing"},
		{`{"name": "ns1", "read": {"served_by": "n1", ...}}`, 0, `{"name": "ns1", "read": {"served_by": 1}}`, "", "want n1 (string)"},
	} {
		got := checkLine(tc.comment, tc.rc, []byte(tc.stdout), []byte(tc.stderr))
		if (tc.fail == "") != (got == "") || !strings.Contains(got, tc.fail) {
			t.Errorf("checkLine(%q, %d, %q, %q) = %q, want failure containing %q", tc.comment, tc.rc, tc.stdout, tc.stderr, got, tc.fail)
		}
	}
}

func TestReadmePortRewrite(t *testing.T) {
	in := `./baton regionserver --id rs$i --grpc-addr 127.0.0.1:810$((i+4)) --masters 127.0.0.1:8100 & curl -s localhost:7072/status --regions 8`
	want := `./baton regionserver --id rs$i --grpc-addr 127.0.0.1:1110$((i+4)) --masters 127.0.0.1:11100 & curl -s localhost:10072/status --regions 8`
	if got := rewritePorts(in, 3000); got != want {
		t.Errorf("rewritePorts:\n got %s\nwant %s", got, want)
	}
	blocks := []shBlock{{heading: "Tables and regions on region servers", cmds: []shCmd{{command: `x 127.0.0.1:810$((i+4))`}}}}
	ports := readmePorts(blocks)
	for _, p := range []int{8105, 8107, 7070, 7072} {
		if !containsInt(ports, p) {
			t.Errorf("readmePorts lacks %d: %v", p, ports)
		}
	}
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
