package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CreateAtomic makes path whole or not at all from what fill writes into
// a temporary file in path's directory (".<name>.tmp-*", so a rename never
// crosses file systems): fill writes it (and may read it back to check it
// before it counts), then the file is fsynced, given perm, renamed over
// path and the directory fsynced. On any error, fill's or a step's (a full
// disk), the temporary file is removed and path is left as it was.
func CreateAtomic(path string, perm os.FileMode, fill func(f *os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = fmt.Errorf("%w (and removing %s: %v)", err, tmp, rerr)
			}
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		// The file is whole and in place; only its name may not survive a
		// power loss.
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}
