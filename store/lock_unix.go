//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked is returned by OpenWAL when another WAL (in this or another
// process) holds the directory.
var ErrLocked = errors.New("store: WAL directory is locked by another process")

// lockDir takes an exclusive, non-blocking flock on dir/LOCK. The lock lives
// as long as the returned file is open; the kernel drops it if the process
// dies, so a stale LOCK file never blocks a restart.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	return f, nil
}
