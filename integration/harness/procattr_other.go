//go:build unix && !linux

package harness

import "syscall"

// procAttr puts an agent in its own process group, so cleanup can kill the
// group. (Without Linux's Pdeathsig, a test binary that dies before its
// cleanup runs leaves its agents running.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
