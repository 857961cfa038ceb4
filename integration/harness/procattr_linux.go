package harness

import "syscall"

// procAttr puts an agent in its own process group (so cleanup can kill the
// group) and has the kernel SIGKILL it if the test binary dies first.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
