package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/security"
)

// TestForceOnAnothersLockAndProcedure: with access control on, the CLI's
// lock release and heartbeat and proc pause, resume, ack and abort on
// another identity's lock or procedure are refused (exit 1) naming its
// owner and --force; an operator's --force is refused too; an admin's
// --force acts, and 'audit list' shows it forced.
func TestForceOnAnothersLockAndProcedure(t *testing.T) {
	c, as := aclCluster(t, 3, map[string]security.Permission{
		"alice": security.PermAdmin, "carol": security.PermAdmin, "bob": security.PermOperate,
	})
	alice, bob, carol := as("alice"), as("bob"), as("carol")

	cl := c.ClientAs("alice")
	lk, err := cl.AcquireLock(ctxT(t), "namespace", []string{"cli-owned"}, true, "job", "", "")
	if err != nil {
		t.Fatal(err)
	}
	lock := strconv.FormatUint(lk.GetLockId(), 10)
	proc, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "1000", "delay": "20ms"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	id := idStr(proc)

	if code, out, errOut := runCLI(t, bob, "proc", "get", id, "--json"); code != exitOK || !strings.Contains(out, `"submitted_by": "client/alice"`) {
		t.Fatalf("bob: proc get --json: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"lock", "release", lock}, {"lock", "heartbeat", lock},
		{"proc", "pause", id}, {"proc", "resume", id}, {"proc", "ack", id},
	} {
		code, out, errOut := runCLI(t, bob, args...)
		if code != exitFailed || !strings.Contains(errOut, "belongs to client/alice") || !strings.Contains(errOut, "--force") {
			t.Fatalf("bob: baton %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		code, out, errOut = runCLI(t, bob, append(args, "--force")...)
		if code != exitFailed || !strings.Contains(errOut, "--force needs permission admin") {
			t.Fatalf("bob: baton %s --force: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, carol, "proc", "abort", id); code != exitFailed || !strings.Contains(errOut, "belongs to client/alice") {
		t.Fatalf("carol: proc abort without --force: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, carol, "proc", "pause", id, "--force"); code != exitOK {
		t.Fatalf("carol: proc pause --force: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, alice, "proc", "abort", id); code != exitOK {
		t.Fatalf("alice: proc abort of her own: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, alice, "lock", "heartbeat", lock); code != exitOK {
		t.Fatalf("alice: lock heartbeat of her own: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, carol, "lock", "release", lock, "--force"); code != exitOK || !strings.Contains(out, "RELEASED") {
		t.Fatalf("carol: lock release --force: exit %d\n%s%s", code, out, errOut)
	}
	c.WaitFor("the forced release listed with its force", func() bool {
		code, out, _ := runCLI(t, carol, "audit", "list", "--method", "ReleaseLock", "--principal", "client/carol")
		return code == exitOK && strings.Contains(out, `"force":true`) && strings.Contains(out, "OK")
	})
}
