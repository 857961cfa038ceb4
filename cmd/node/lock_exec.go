package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// runningCommand is the command 'lock acquire ... -- CMD' runs while it
// holds the lock.
type runningCommand struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the command has exited
	err  error         // its Wait error, set before done closes
}

// startCommand starts argv with the caller's stdin and the given stdout
// and stderr, and BATON_LOCK_ID set to the lock it runs under.
func startCommand(argv []string, lockID uint64, stdout, stderr io.Writer) (*runningCommand, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "BATON_LOCK_ID="+strconv.FormatUint(lockID, 10))
	// The command stays in baton's process group, so a terminal's Ctrl-C
	// and job control reach it as they would without baton. Signals
	// baton sends go to the command alone; a child of it that outlives it
	// may hold the output open, which must not keep baton waiting.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("could not start %s under lock %d: %w", argv[0], lockID, err)
	}
	r := &runningCommand{cmd: cmd, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

func (r *runningCommand) signal(sig os.Signal) {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(sig) // it may have exited in between: nothing to stop
	}
}

// stop sends SIGTERM, then SIGKILL if the command has not exited
// killAfter later, and waits for it to exit.
func (r *runningCommand) stop(killAfter time.Duration) {
	r.signal(syscall.SIGTERM)
	t := time.NewTimer(killAfter)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		r.signal(syscall.SIGKILL)
		<-r.done
	}
}

// startFailed is the exit code of a command that could not be started, as
// a shell gives it: 127 if it was not found, 126 otherwise.
func startFailed(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// exitCode is the command's exit status as a shell reports it: its code,
// or 128 + the signal that killed it. Call it once done is closed.
func (r *runningCommand) exitCode() int {
	if r.err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if !errors.As(r.err, &ee) {
		return exitFailed
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
