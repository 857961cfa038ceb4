//go:build unix && !linux

package main

import "syscall"

// benchProcAttr puts a process `baton bench` starts in its own process
// group, so that it can be killed with whatever it started. (Without
// Linux's Pdeathsig, a bench killed with SIGKILL leaves its cluster
// running.)
func benchProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// benchKillGroup sends SIGKILL to the process group of pid.
func benchKillGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }
