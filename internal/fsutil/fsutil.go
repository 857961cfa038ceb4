// Package fsutil holds the few file-system steps Baton's stores must take
// the same way everywhere for a crash to leave a whole file or none: write
// to a temporary name, fsync, rename over the old one, fsync the directory
// (without the last step a power loss can forget the rename).
package fsutil

import (
	"fmt"
	"os"
)

// SyncDir fsyncs directory dir, so that entries created, renamed or
// removed in it survive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFileAtomic replaces path with data: after a crash path holds either
// its old content or data, never a torn mix. The temporary file is
// path+".tmp" in the same directory (a rename must not cross file
// systems).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	// perm whatever the umask, and whatever mode a leftover tmp had.
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(dirOf(path))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			if i == 0 {
				return path[:1]
			}
			return path[:i]
		}
	}
	return "."
}
