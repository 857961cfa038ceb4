package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestLockRunsCommand: 'lock acquire ... -- COMMAND' holds the lock while
// COMMAND runs, and only then: the lock is released when the command
// exits (whatever its exit), the command is stopped when the lock is lost,
// and the exit status is the command's.
func TestLockRunsCommand(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	cl := fc.Client()
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}

	t.Run("held while it runs, released when it exits", func(t *testing.T) {
		path, open, _ := commandGate(t)
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "t", "--exclusive", "--",
			"sh", "-c", `echo "under lock $BATON_LOCK_ID"; cat "$1" >/dev/null; exit 7`, "sh", path)
		defer interrupt()
		id := commandLockID(t, fc, stdout)
		if st := lockState(t, cl, id); st != "held" {
			t.Fatalf("lock %d %s while the command runs", id, st)
		}
		other, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:t"}, true, "test", "", "")
		if err != nil || other.GetState() != client.LockWaiting {
			t.Fatalf("a second exclusive lock: %v %v, want WAITING", other, err)
		}
		open()
		if code := exitOf(t, done); code != 7 {
			t.Fatalf("exit %d, want the command's 7\nstderr: %s", code, stderr.String())
		}
		fc.WaitFor("the lock released", func() bool { return lockState(t, cl, id) == client.LockReleased })
		fc.WaitFor("the waiting lock granted", func() bool {
			r, err := cl.LockHeartbeat(ctxT(t), other.GetLockId())
			return err == nil && r.GetState() == client.LockAcquired
		})
		// stdout is the command's alone; the lock's lines are on stderr.
		if got := stdout.String(); got != "under lock "+strconv.FormatUint(id, 10)+"\n" {
			t.Errorf("stdout %q", got)
		}
		for _, want := range []string{"ACQUIRED", "released when the command exits", "RELEASED"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
		}
		if _, err := cl.ReleaseLock(ctxT(t), other.GetLockId()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("lost while it runs", func(t *testing.T) {
		path, _, _ := commandGate(t)
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "t", "--lease", "1s", "--",
			"sh", "-c", `echo "under lock $BATON_LOCK_ID"; exec cat "$1" >/dev/null`, "sh", path)
		defer interrupt()
		id := commandLockID(t, fc, stdout)
		if code, _, errs := runCLI(t, env, "lock", "release", strconv.FormatUint(id, 10)); code != 0 {
			t.Fatalf("release: %d %s", code, errs)
		}
		if code := exitOf(t, done); code != 1 {
			t.Fatalf("exit %d, want 1\nstderr: %s", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "is lost: stopping sh with SIGTERM") {
			t.Errorf("stderr: %s", stderr.String())
		}
	})

	// Ctrl-C at a terminal reaches baton and the command alike (one
	// process group): baton holds the lock until the command has gone.
	t.Run("interrupted", func(t *testing.T) {
		path, _, _ := commandGate(t)
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "t", "--",
			"sh", "-c", `echo "under lock $BATON_LOCK_ID pid $$"; exec cat "$1" >/dev/null`, "sh", path)
		id := commandLockID(t, fc, stdout)
		pid, _ := strconv.Atoi(regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(stdout.String())[1])
		interrupt()
		fc.WaitFor("baton to wait for the command", func() bool { return strings.Contains(stderr.String(), "the lock is held until then") })
		if st := lockState(t, cl, id); st != "held" {
			t.Fatalf("lock %d %s while the command still runs", id, st)
		}
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := exitOf(t, done); code != 128+int(syscall.SIGINT) {
			t.Fatalf("exit %d, want %d (the command stopped by SIGINT)\nstderr: %s", code, 128+int(syscall.SIGINT), stderr.String())
		}
		fc.WaitFor("the lock released", func() bool { return lockState(t, cl, id) == client.LockReleased })
	})

	// An explicit --timeout bounds the wait for the lock: exit 3, the
	// request withdrawn from the queue (it never takes the lock, and holds
	// no one up), the command never run. It used to wait until the lock
	// came free and run the command then.
	t.Run("an explicit --timeout bounds the wait", func(t *testing.T) {
		held, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:tw"}, true, "test", "", "")
		if err != nil || held.GetState() != client.LockAcquired {
			t.Fatalf("the holder's lock: %v %v", held, err)
		}
		marker := filepath.Join(t.TempDir(), "ran")
		start := time.Now()
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "tw", "--exclusive", "--timeout", "2s", "--",
			"sh", "-c", `touch "$1"`, "sh", marker)
		defer interrupt()
		code := exitOf(t, done)
		took := time.Since(start)
		if code != exitUnavailable {
			t.Fatalf("exit %d, want 3\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
		}
		m := regexp.MustCompile(`timed out after 2s waiting for lock (\d+): withdrawn from the queue`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("stderr: %s", stderr.String())
		}
		if took < 2*time.Second {
			t.Errorf("gave up after %v, before its --timeout of 2s", took)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("the command ran (%v)", err)
		}
		id, _ := strconv.ParseUint(m[1], 10, 64)
		if p, err := cl.Get(ctxT(t), id); err != nil || !client.Terminal(p.GetState()) {
			t.Fatalf("the withdrawn lock's procedure %d: %v %v, want it ended (gone from the queue)", id, p, err)
		}
		if r, err := cl.LockHeartbeat(ctxT(t), id); err != nil || r.GetState() != client.LockReleased {
			t.Fatalf("the withdrawn lock %d: %v %v, want RELEASED", id, r, err)
		}
		if _, err := cl.ReleaseLock(ctxT(t), held.GetLockId()); err != nil {
			t.Fatal(err)
		}
		next, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:tw"}, true, "test", "", "")
		if err != nil || next.GetState() != client.LockAcquired {
			t.Fatalf("a lock after the holder let go: %v %v, want ACQUIRED at once", next, err)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("the command ran once the lock came free (%v)", err)
		}
		if _, err := cl.ReleaseLock(ctxT(t), next.GetLockId()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the command cannot start", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "lock", "acquire", "--kind", "table", "--name", "t", "--", filepath.Join(t.TempDir(), "missing"))
		if code != 127 || !strings.Contains(stderr, "could not start") || !strings.Contains(stderr, "RELEASED") || stdout != "" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
	})
}

// commandGate makes a FIFO that a command run under a lock blocks on
// (`cat GATE`), so that it runs exactly as long as the test wants. open
// lets it go, waiting for it to be read; release lets it go if it is still
// read, and does nothing otherwise (for defers).
func commandGate(t *testing.T) (path string, open, release func()) {
	path = filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	open = func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	release = func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	return path, open, release
}

// underLock is what the tests' commands print first: the lock they run
// under.
var underLock = regexp.MustCompile(`under lock (\d+)`)

// commandLockID waits for a command under a lock to start, and returns the
// lock's id it printed.
func commandLockID(t *testing.T, fc *clustertest.Cluster, stdout *syncbuf.Buffer) uint64 {
	t.Helper()
	fc.WaitFor("the command to start under the lock", func() bool { return underLock.MatchString(stdout.String()) })
	id, _ := strconv.ParseUint(underLock.FindStringSubmatch(stdout.String())[1], 10, 64)
	return id
}

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
