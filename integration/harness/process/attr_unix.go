//go:build unix && !linux

package process

import "syscall"

// sysProcAttr puts a child in its own process group, so that it can be
// killed with whatever it started. (Without Linux's Pdeathsig, a parent
// killed with SIGKILL leaves its children running.) A uid other than 0
// runs the child as that uid and gid.
func sysProcAttr(uid uint32) (*syscall.SysProcAttr, error) {
	a := &syscall.SysProcAttr{Setpgid: true}
	if uid != 0 {
		a.Credential = &syscall.Credential{Uid: uid, Gid: uid}
	}
	return a, nil
}
