//go:build !unix

package store

import (
	"errors"
	"os"
)

// ErrLocked is returned by OpenWAL when another WAL holds the directory.
var ErrLocked = errors.New("store: WAL directory is locked by another process")

func lockDir(path string) (*os.File, error) {
	return nil, errors.New("store: WAL locking is only implemented on unix")
}
