package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testnet"
)

// runCLI runs the baton binary with args and returns its exit code, stdout
// and stderr.
func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, nodeBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("node %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// decodeJSON decodes s, a command's stdout, into v: it must be one JSON
// document.
func decodeJSON(t *testing.T, what, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: stdout is not one JSON document: %v\n%s", what, err, s)
	}
}

// expectExit fails t unless a command exited with want.
func expectExit(t *testing.T, what string, got, want int, stderr string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: exit %d, want %d; stderr:\n%s", what, got, want, stderr)
	}
}

// TestCLI drives a real cluster through the client commands: submit with
// --wait and --json (exit 0, SUCCESS), a nonce resubmitted (same id), a
// failing procedure (exit 1, ROLLEDBACK), get and wait by id, a submission
// through a follower's address only (forwarded), cluster status (names
// the leader), an unknown type (exit 2), an unknown id (exit 1), and an
// address where nothing listens (exit 3).
func TestCLI(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 60*time.Second)
	addr := strings.Join(c.AdminAddrs(), ",")

	type procDoc struct {
		ID    uint64 `json:"id"`
		State string `json:"state"`
		Nonce string `json:"nonce"`
		Error string `json:"error"`
	}

	code, out, serr := runCLI(t, ctx, "proc", "submit", "sleep", "--arg", "steps=2", "--arg", "delay=10ms", "--nonce", "cli-1", "--wait", "--addr", addr, "--json")
	expectExit(t, "submit --wait", code, 0, serr)
	var p procDoc
	decodeJSON(t, "submit --wait", out, &p)
	if p.State != "SUCCESS" || p.ID == 0 || p.Nonce != "cli-1" {
		t.Errorf("submit --wait: %+v, want SUCCESS with nonce cli-1", p)
	}

	code, out, serr = runCLI(t, ctx, "proc", "submit", "sleep", "--arg", "steps=2", "--arg", "delay=10ms", "--nonce", "cli-1", "--addr", addr, "--json")
	expectExit(t, "resubmit", code, 0, serr)
	var again struct {
		ID uint64 `json:"id"`
	}
	decodeJSON(t, "resubmit", out, &again)
	if again.ID != p.ID {
		t.Errorf("resubmitting nonce cli-1 gave id %d, first gave %d", again.ID, p.ID)
	}

	code, out, serr = runCLI(t, ctx, "proc", "submit", "fail", "--arg", "steps=3", "--arg", "fail_at=1", "--wait", "--addr", addr, "--json")
	expectExit(t, "submit fail --wait", code, 1, serr)
	var f procDoc
	decodeJSON(t, "submit fail --wait", out, &f)
	if f.State != "ROLLEDBACK" || f.Error == "" {
		t.Errorf("fail procedure: %+v, want ROLLEDBACK with an error", f)
	}

	id := strconv.FormatUint(p.ID, 10)
	code, out, serr = runCLI(t, ctx, "proc", "get", id, "--addr", addr, "--json")
	expectExit(t, "get", code, 0, serr)
	var g procDoc
	decodeJSON(t, "get", out, &g)
	if g.ID != p.ID || g.State != "SUCCESS" {
		t.Errorf("get %s: %+v", id, g)
	}
	code, _, serr = runCLI(t, ctx, "proc", "wait", id, "--addr", addr)
	expectExit(t, "wait", code, 0, serr)

	// Through one follower only: the write is forwarded to the leader.
	follower := c.Node(c.Followers(leader)[0]).GRPCAddr
	code, out, serr = runCLI(t, ctx, "proc", "submit", "sleep", "--arg", "steps=1", "--arg", "delay=1ms", "--wait", "--addr", follower, "--json")
	expectExit(t, "submit via a follower", code, 0, serr)
	decodeJSON(t, "submit via a follower", out, &g)
	if g.State != "SUCCESS" {
		t.Errorf("submit via a follower: %+v", g)
	}

	code, out, serr = runCLI(t, ctx, "cluster", "status", "--addr", addr, "--json")
	expectExit(t, "cluster status", code, 0, serr)
	var st struct {
		LeaderID string `json:"leader_id"`
		Term     uint64 `json:"term"`
		Peers    []struct {
			ID string `json:"id"`
		} `json:"peers"`
	}
	decodeJSON(t, "cluster status", out, &st)
	// Any member may lead by now: on a loaded machine an election may
	// have followed the one the test started with.
	members := map[string]bool{}
	for _, n := range c.Nodes {
		members[n.ID] = true
	}
	if !members[st.LeaderID] || st.Term == 0 || len(st.Peers) != 3 {
		t.Errorf("cluster status: leader %q term %d, %d peers; want a member leading (%s did at the start), 3 peers", st.LeaderID, st.Term, len(st.Peers), leader)
	}

	code, _, serr = runCLI(t, ctx, "proc", "submit", "no-such-type", "--addr", addr)
	expectExit(t, "unknown type", code, 2, serr)
	code, _, serr = runCLI(t, ctx, "proc", "get", "999999", "--addr", addr)
	expectExit(t, "unknown id", code, 1, serr)
	dead := testnet.DeadAddr(t)
	code, _, serr = runCLI(t, ctx, "cluster", "status", "--addr", dead, "--timeout", "1s")
	expectExit(t, "nothing listening", code, 3, serr)
}

// TestCLIReads: reads say who served them and at which consistency;
// linearizable reads through a follower are answered by the leader, stale
// ones by the follower; failed preconditions carry their code.
func TestCLIReads(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 60*time.Second)
	addr := strings.Join(c.AdminAddrs(), ",")
	fid := c.Followers(leader)[0]
	follower := c.Node(fid).GRPCAddr
	type readDoc struct {
		ServedBy     string `json:"served_by"`
		AppliedIndex uint64 `json:"applied_index"`
		Consistency  string `json:"consistency"`
		RaftState    string `json:"raft_state"`
	}

	code, _, serr := runCLI(t, ctx, "ns", "create", "r1", "--wait", "--addr", addr)
	expectExit(t, "ns create", code, 0, serr)
	code, out, serr := runCLI(t, ctx, "ns", "create", "r1", "--wait", "--addr", addr, "--json")
	expectExit(t, "ns create of an existing namespace", code, 1, serr)
	var started struct {
		State    string `json:"state"`
		Code     string `json:"code"`
		ExitCode int    `json:"exit_code"`
	}
	decodeJSON(t, "ns create again", out, &started)
	if started.State != "ROLLEDBACK" || started.Code != "ALREADY_EXISTS" || started.ExitCode != 1 {
		t.Errorf("ns create of an existing namespace: %+v, want ROLLEDBACK, code ALREADY_EXISTS, exit_code 1", started)
	}
	if !strings.Contains(serr, "ALREADY_EXISTS") {
		t.Errorf("ns create of an existing namespace: stderr %q does not name the code", serr)
	}

	var ns struct {
		Name string  `json:"name"`
		Read readDoc `json:"read"`
	}
	code, out, serr = runCLI(t, ctx, "ns", "get", "r1", "--addr", follower, "--json")
	expectExit(t, "ns get through a follower", code, 0, serr)
	decodeJSON(t, "ns get", out, &ns)
	if ns.Name != "r1" || ns.Read.Consistency != "linearizable" || ns.Read.RaftState != "Leader" || ns.Read.ServedBy == fid || ns.Read.AppliedIndex == 0 {
		t.Errorf("ns get through follower %s: %+v, want r1 served linearizably by the leader", fid, ns)
	}
	code, out, serr = runCLI(t, ctx, "ns", "get", "r1", "--stale", "--addr", follower, "--json")
	if code == 1 {
		// The follower may not have applied the create yet: that is what
		// stale means. It must say it answered itself.
		t.Logf("stale get through the follower: %s", serr)
	} else {
		expectExit(t, "ns get --stale", code, 0, serr)
		decodeJSON(t, "ns get --stale", out, &ns)
		if ns.Read.Consistency != "stale" || ns.Read.ServedBy != fid {
			t.Errorf("stale ns get through follower %s: %+v, want served by it, stale", fid, ns)
		}
	}
	code, out, serr = runCLI(t, ctx, "ns", "get", "nosuch", "--addr", addr, "--json")
	expectExit(t, "ns get of a missing namespace", code, 1, serr)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	decodeJSON(t, "ns get nosuch", out, &e)
	if e.Error.Code != "NOT_FOUND" {
		t.Errorf("ns get nosuch: code %q, want NOT_FOUND", e.Error.Code)
	}
	code, _, serr = runCLI(t, ctx, "ns", "list", "--stale", "--addr", follower)
	expectExit(t, "ns list --stale", code, 0, serr)
	if !strings.Contains(serr, "served by "+fid) || !strings.Contains(serr, "stale") {
		t.Errorf("ns list --stale: stderr %q does not say the follower served it, stale", serr)
	}
}
