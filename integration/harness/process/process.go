// Package process starts, watches and kills the real processes of a Baton
// cluster on one machine: agents and region servers, each restartable with
// the same command line, its output appended to a log file. The
// integration harness and `baton bench` both run their clusters with it,
// so that the rules every such child needs are kept once: its own process
// group, killed whole; on Linux, SIGKILL from the kernel if the parent
// dies first, so that neither a test binary killed by its timeout nor a
// bench killed with SIGKILL leaves a cluster behind.
//
// The package imports nothing of Baton and nothing of package testing:
// the baton binary links it.
package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// ErrNotStarted is returned by calls on a Process never started.
var ErrNotStarted = errors.New("never started")

// errNotRunning is returned by signals sent to a process that has exited.
var errNotRunning = errors.New("not running")

// killWait bounds the wait for a process to exit after SIGKILL: one that
// outlives it is stuck in the kernel (a hung disk), which the caller must
// hear of rather than wait on.
const killWait = 10 * time.Second

// Spec is a process's command line and where its output goes.
type Spec struct {
	// Name is what errors and the log's start banner call the process.
	Name string
	Bin  string
	Args []string
	// Env is the whole environment; nil runs the process with this one's.
	Env     []string
	LogPath string
	// Banner, if set, writes a line "=== <Banner>: start #N of <Name> at
	// <time> ===" into the log before each start, so that a log spanning
	// restarts reads by incarnation.
	Banner string
	// UID, if not 0, runs the process as this uid and gid (unix only).
	UID uint32
}

// Process is one restartable child process. Its zero value is ready to
// Start; it may be started again once the previous process has exited.
type Process struct {
	mu     sync.Mutex
	spec   Spec
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	starts int
	logOff int64 // size of the log file when the current process started
	killed bool  // by Kill, on purpose
}

// Start runs the process of spec, appending its output to spec.LogPath.
// It fails if the previous process is still running.
func (p *Process) Start(spec Spec) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%s is already running", spec.Name)
	}
	attr, err := sysProcAttr(spec.UID)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var off int64
	if st, err := f.Stat(); err == nil {
		off = st.Size()
	}
	p.starts++
	if spec.Banner != "" {
		fmt.Fprintf(f, "=== %s: start #%d of %s at %s ===\n", spec.Banner, p.starts, spec.Name, time.Now().Format(time.RFC3339Nano))
	}
	cmd := exec.Command(spec.Bin, spec.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = spec.Env
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	p.spec, p.cmd, p.done, p.logOff, p.killed = spec, cmd, done, off, false
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	return nil
}

// Running reports whether the process is alive (started and not yet
// exited). A paused (SIGSTOP) process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// runningLocked is Running with p.mu held.
func (p *Process) runningLocked() bool { return p.done != nil && !exited(p.done) }

// exited reports whether done, a process's, is closed: never for a nil
// one (no process started).
func exited(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Crashed reports whether the process exited without Kill having been
// called on it.
func (p *Process) Crashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.killed && exited(p.done)
}

// Pid is the current process's id (0 if it never started).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Done is closed when the current process has exited; nil if it never
// started.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitCode is the exit code of the current process once it has exited
// (see Done), -1 before or if a signal ended it.
func (p *Process) ExitCode() int {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || !exited(done) {
		return -1
	}
	return cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL to the process's group and waits until the process
// has exited, at most 10 s. A process that already exited is not an
// error; one never started is ErrNotStarted.
func (p *Process) Kill() error {
	p.mu.Lock()
	cmd, done, name := p.cmd, p.done, p.spec.Name
	if cmd != nil {
		p.killed = true
	}
	p.mu.Unlock()
	if cmd == nil {
		return ErrNotStarted
	}
	if exited(done) {
		return nil
	}
	if err := killGroup(cmd.Process.Pid); err != nil {
		// The process alone, at least.
		_ = cmd.Process.Kill()
	}
	select {
	case <-done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s (pid %d) did not exit 10 s after SIGKILL", name, cmd.Process.Pid)
	}
}

// Signal sends sig to the process alone (not its group): SIGTERM, for a
// graceful shutdown.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return ErrNotStarted
	}
	return cmd.Process.Signal(sig)
}

// runningPid is the pid of the running process, or why there is none.
func (p *Process) runningPid() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0, ErrNotStarted
	}
	if exited(p.done) {
		return 0, errNotRunning
	}
	return p.cmd.Process.Pid, nil
}

// LogSinceStart returns what the process has logged since its latest
// start ("" if the log cannot be read).
func (p *Process) LogSinceStart() string {
	p.mu.Lock()
	path, off := p.spec.LogPath, p.logOff
	p.mu.Unlock()
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}
