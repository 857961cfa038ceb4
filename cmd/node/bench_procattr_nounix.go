//go:build !unix

package main

import (
	"os"
	"syscall"
)

// benchProcAttr: no process groups here; benchKillGroup kills the process
// alone (the agents and region servers start no children of their own).
func benchProcAttr() *syscall.SysProcAttr { return nil }

// benchKillGroup kills process pid.
func benchKillGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
