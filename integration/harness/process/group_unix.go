//go:build unix

package process

import (
	"errors"
	"syscall"
)

// killGroup sends SIGKILL to the process group of pid. A group already
// gone is not an error: the process exited on its own.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// SignalGroup sends sig to the running process's group (SIGSTOP, SIGCONT,
// SIGQUIT for the Go runtime's goroutine dump).
func (p *Process) SignalGroup(sig syscall.Signal) error {
	pid, err := p.runningPid()
	if err != nil {
		return err
	}
	return syscall.Kill(-pid, sig)
}
