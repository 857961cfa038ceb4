//go:build !unix

package store

import "os"

// mapFile reads the file at path where mmap is not available.
func mapFile(path string) (data []byte, release func(), err error) {
	data, err = os.ReadFile(path)
	return data, func() {}, err
}
