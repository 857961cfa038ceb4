//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the file at path read-only; release unmaps it, after which
// the bytes must not be touched. A sealed segment does not change while it
// is mapped (only its deletion, which leaves a mapping valid, may follow).
func mapFile(path string) (data []byte, release func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, func() {}, nil // mmap refuses a length of 0
	}
	if fi.Size() != int64(int(fi.Size())) {
		return nil, nil, fmt.Errorf("map %s: %d bytes do not fit in memory", path, fi.Size())
	}
	data, err = syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("map %s: %w", path, err)
	}
	return data, func() { _ = syscall.Munmap(data) }, nil
}
