package process

import "syscall"

// sysProcAttr puts a child in its own process group (so that it can be
// killed with whatever it started) and has the kernel SIGKILL it if this
// process dies first: a test binary or a bench killed with SIGKILL leaves
// nothing behind. A uid other than 0 runs the child as that uid and gid.
func sysProcAttr(uid uint32) (*syscall.SysProcAttr, error) {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		a.Credential = &syscall.Credential{Uid: uid, Gid: uid}
	}
	return a, nil
}
