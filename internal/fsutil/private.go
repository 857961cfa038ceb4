package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// The modes of what a node keeps in its data directory: its owner's
// alone. The directory holds the whole replicated state (access-control
// bindings, token hashes, the audit trail), which no other local user
// should read.
const (
	PrivateDirMode  fs.FileMode = 0o700
	PrivateFileMode fs.FileMode = 0o600
)

// MkdirPrivate creates dir and its missing parents, and sets dir itself to
// PrivateDirMode whatever the umask (and whatever mode it had: the start
// of a node has already warned of a looser one, see Tighten).
func MkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, PrivateDirMode); err != nil {
		return err
	}
	return os.Chmod(dir, PrivateDirMode)
}

// Loose is an entry Tighten found open to group or others.
type Loose struct {
	Path string
	// Mode is the permission bits it had, Now those it has (Mode if the
	// change failed, with Err saying why).
	Mode, Now fs.FileMode
	Err       error
}

// Tighten removes the group and other permission bits of root and of
// everything under it, calling found for each entry that had any. A root
// that is a symbolic link (a data directory moved to another disk and
// linked to) is resolved first; no link under it is followed. A root that
// does not exist is nothing to do. The error is the walk's (an unreadable
// directory); a failed chmod is reported through found, and the walk goes
// on.
func Tighten(root string, found func(Loose)) error {
	// WalkDir neither follows nor descends a root that is a link.
	if resolved, err := filepath.EvalSymlinks(root); err == nil {
		root = resolved
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm()
		if mode&0o077 == 0 {
			return nil
		}
		l := Loose{Path: path, Mode: mode, Now: mode &^ 0o077}
		if l.Err = os.Chmod(path, l.Now); l.Err != nil {
			l.Now = mode
		}
		found(l)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// TightenFiles sets dir to PrivateDirMode and the files directly in it to
// PrivateFileMode: for what a library wrote with modes of its own.
func TightenFiles(dir string) error {
	if err := os.Chmod(dir, PrivateDirMode); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() {
			errs = append(errs, os.Chmod(filepath.Join(dir, e.Name()), PrivateFileMode))
		}
	}
	return errors.Join(errs...)
}
