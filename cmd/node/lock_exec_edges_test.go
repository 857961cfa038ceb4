package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestLockCommandEdges: 'lock acquire ... -- COMMAND' at its edges.
func TestLockCommandEdges(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	cl := fc.Client()
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}

	// Interrupted before the lock was granted: COMMAND never ran, so the
	// exit must not be 0 (a '&& next' must not go on), as 'proc wait'
	// exits 130 when interrupted.
	t.Run("interrupted while waiting", func(t *testing.T) {
		other, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:w"}, true, "test", "", "")
		if err != nil || other.GetState() != client.LockAcquired {
			t.Fatalf("first lock: %v %v", other, err)
		}
		defer cl.ReleaseLock(ctxT(t), other.GetLockId())
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "w", "--exclusive", "--",
			"sh", "-c", "echo ran")
		defer interrupt()
		fc.WaitFor("WAITING", func() bool { return strings.Contains(stderr.String(), "WAITING") })
		interrupt()
		code := exitOf(t, done)
		if strings.Contains(stdout.String(), "ran") {
			t.Fatalf("the command ran: %q", stdout.String())
		}
		if code == exitOK {
			t.Fatalf("exit 0 though COMMAND never ran (interrupted while WAITING)\nstderr: %s", stderr.String())
		}
	})

	// Interrupted while COMMAND runs, and COMMAND takes its time to stop
	// (here it ignores SIGTERM until the test lets it go): the lock must
	// stay held, renewed, until COMMAND has exited. Otherwise the lease
	// runs out and another holder gets the lock while COMMAND still runs.
	t.Run("interrupted, command slow to stop", func(t *testing.T) {
		path, _, release := commandGate(t)
		defer release()
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "s", "--exclusive", "--lease", "1s", "--",
			"sh", "-c", `trap "" TERM; echo "under lock $BATON_LOCK_ID"; exec cat "$1" >/dev/null`, "sh", path)
		defer interrupt()
		id := commandLockID(t, fc, stdout)
		heartbeats := fc.CountCalls(lockHeartbeat)
		interrupt()
		// Three heartbeats after the interrupt (one lease), or the lock is
		// gone: whichever comes first.
		testwait.For(t, 20*time.Second, "three heartbeats or the lock gone", func() bool {
			return heartbeats() >= 3 || lockState(t, cl, id) != "held"
		})
		if st := lockState(t, cl, id); st != "held" {
			t.Errorf("lock %d %s while its command still runs (baton stopped heartbeating when interrupted)", id, st)
		}
		release()
		code := exitOf(t, done)
		t.Logf("exit %d\nstderr: %s", code, stderr.String())
	})

	// The lock is lost and COMMAND ignores SIGTERM: baton must not wait
	// for it forever (kill it after a grace, as timeout(1) -k does).
	t.Run("lost, command ignores SIGTERM", func(t *testing.T) {
		path, _, release := commandGate(t)
		defer release()
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "l", "--lease", "1s", "--kill-after", "500ms", "--",
			"sh", "-c", `trap "" TERM; echo "under lock $BATON_LOCK_ID"; exec cat "$1" >/dev/null`, "sh", path)
		defer interrupt()
		id := commandLockID(t, fc, stdout)
		if code, _, errs := runCLI(t, env, "lock", "release", strconv.FormatUint(id, 10)); code != 0 {
			t.Fatalf("release: %d %s", code, errs)
		}
		select {
		case code := <-done:
			if code != exitFailed {
				t.Errorf("exit %d, want 1", code)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("baton still waits for a command that ignores SIGTERM, 15 s after the lock was lost\nstderr: %s", stderr.String())
		}
	})

	// "--" as a flag's value is not the command's separator.
	t.Run("-- as a flag value", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "lock", "acquire", "--kind", "table", "--name", "d", "--description", "--", "--", "sh", "-c", "echo ran")
		if code != 0 || stdout != "ran\n" {
			t.Errorf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
		}
	})
}
