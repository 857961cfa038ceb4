package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/security"
)

func TestTransferLeadershipUsage(t *testing.T) {
	for _, args := range [][]string{
		{"cluster", "transfer-leadership", "m1"},
		{"cluster", "transfer-leadership", "--from", "m1", "--to", "m1"},
		{"cluster", "transfer-leadership", "--nosuch"},
	} {
		if code, out, errOut := runCLI(t, map[string]string{"BATON_ADDR": "127.0.0.1:1"}, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
}

// transfer-leadership moves leadership away from the leader (an admin's
// call, or the leader's own certificate asking for itself, as a pod's
// preStop hook does); asked --from a follower, it does nothing and exits
// 0; a master's certificate asking for another member is refused.
func TestTransferLeadership(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.New(t, clustertest.Config{SteadyLeader: true, PKI: pki, Grants: map[string]security.Permission{"alice": security.PermAdmin}})
	as := func(who security.Identity) map[string]string {
		f, err := pki.Issue(who, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"BATON_ADDR": strings.Join(c.AdminAddrs(), ","), "BATON_TLS_CA": f.CA, "BATON_TLS_CERT": f.Cert, "BATON_TLS_KEY": f.Key}
	}
	alice := as(security.Identity{Role: security.RoleClient, ID: "alice"})
	// As the preStop hook runs: in the master's pod, asking that master
	// (--addr 127.0.0.1:7070 there) with its certificate.
	asMaster := func(id string) map[string]string {
		env := as(security.Identity{Role: security.RoleMaster, ID: id})
		for _, m := range c.Masters() {
			if m.ID == id {
				env["BATON_ADDR"] = m.AdminAddr()
			}
		}
		return env
	}
	transfer := func(env map[string]string, args ...string) (int, transferJSON, string) {
		t.Helper()
		code, out, errOut := runCLI(t, env, append([]string{"cluster", "transfer-leadership", "--json", "--timeout", "20s"}, args...)...)
		var doc transferJSON
		if code == exitOK {
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("--json: %v\n%s", err, out)
			}
		}
		return code, doc, out + errOut
	}

	// The leader every master agrees on, after a transfer said who took
	// over (WaitLeaderKnown may still see the one before).
	waitLeads := func(id string) string {
		t.Helper()
		c.WaitFor(id+" leads", func() bool {
			i, _ := c.LeaderNow()
			return i >= 0 && c.Master(i).ID == id
		})
		return id
	}
	indexOf := func(id string) int {
		for i, m := range c.Masters() {
			if m.ID == id {
				return i
			}
		}
		t.Fatalf("no master %s", id)
		return -1
	}
	li := c.WaitLeaderKnown()
	leader := c.Master(li).ID
	follower := c.Master((li + 1) % 3).ID

	// The chart's preStop gives no --from: an exec'd hook's arguments are
	// not expanded, so the member comes from BATON_ID, set in the pod.
	preStop := func(id string) map[string]string {
		env := asMaster(id)
		env["BATON_ID"] = id
		return env
	}
	// A follower's preStop: nothing to do.
	if code, doc, out := transfer(preStop(follower)); code != exitOK || doc.Transferred || doc.LeaderAfter != leader {
		t.Fatalf("--from follower %s: exit %d %+v, want 0, not transferred, leader %s\n%s", follower, code, doc, leader, out)
	}
	// A member that is not one (a typo, another cluster's BATON_ID):
	// refused, not "nothing to do".
	if code, _, out := transfer(alice, "--from", "nosuch"); code != exitFailed || !strings.Contains(out, "not a member") {
		t.Fatalf("--from nosuch: exit %d, want %d (not a member)\n%s", code, exitFailed, out)
	}
	// A master's certificate for another member: refused.
	if code, _, out := transfer(asMaster(follower), "--from", leader); code != exitFailed || !strings.Contains(out, "PermissionDenied") && !strings.Contains(out, "may ask only for itself") {
		t.Fatalf("master %s asking for %s: exit %d, want %d (permission denied)\n%s", follower, leader, code, exitFailed, out)
	}
	if id, _ := c.Master(li).Node().Leader(); id != leader {
		t.Fatalf("leader moved to %s after refused and no-op calls", id)
	}
	// The leader's own preStop: leadership moves.
	code, doc, out := transfer(preStop(leader))
	if code != exitOK || !doc.Transferred || doc.From != leader || doc.LeaderAfter == "" || doc.LeaderAfter == leader {
		t.Fatalf("--from leader %s with its own certificate: exit %d %+v, want 0, transferred to another\n%s\n%s", leader, code, doc, out, c.Logs(leader))
	}
	t.Logf("%s", doc.Message)

	// A leader's certificate asking through another master (--addr a
	// Service in front of every master): that master judges it and the
	// leader takes its word.
	// Cut when the leader changes, as forwarded calls are, it would be
	// sent again by the client and told the member no longer leads.
	leader = waitLeads(doc.LeaderAfter)
	via := c.Master((indexOf(leader) + 1) % 3)
	env := as(security.Identity{Role: security.RoleMaster, ID: leader})
	env["BATON_ADDR"] = via.AdminAddr()
	code, doc, out = transfer(env, "--from", leader)
	if code != exitOK || !doc.Transferred || doc.LeaderAfter == leader {
		t.Fatalf("leader %s's certificate through %s: exit %d %+v, want 0, transferred\n%s", leader, via.ID, code, doc, out)
	}
	t.Logf("through %s: %+v", via.ID, doc)

	// An admin, to a chosen voter.
	target := c.Master((indexOf(waitLeads(doc.LeaderAfter)) + 1) % 3).ID
	code, doc, out = transfer(alice, "--to", target)
	if code != exitOK || !doc.Transferred || doc.To != target {
		t.Fatalf("alice --to %s: exit %d %+v\n%s", target, code, doc, out)
	}
	c.WaitFor(target+" leads", func() bool {
		i, _ := c.LeaderNow()
		return i >= 0 && c.Master(i).ID == target
	})
}
