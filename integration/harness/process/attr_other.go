//go:build !unix

package process

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr: no process groups here; killGroup kills the process alone
// (the agents and region servers start no children of their own).
func sysProcAttr(uid uint32) (*syscall.SysProcAttr, error) {
	if uid != 0 {
		return nil, errors.New("running a process as another uid needs a unix system")
	}
	return nil, nil
}

// killGroup kills process pid.
func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
