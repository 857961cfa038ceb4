package main

import "syscall"

// benchProcAttr puts a process `baton bench` starts in its own process
// group (so that it can be killed with whatever it started) and has the
// kernel SIGKILL it if the bench process itself dies first: a bench killed
// with SIGKILL leaves no cluster behind.
func benchProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// benchKillGroup sends SIGKILL to the process group of pid.
func benchKillGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }
