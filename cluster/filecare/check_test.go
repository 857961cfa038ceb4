package filecare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// logsRoot returns the page id of the logs bucket's root in the raft-boltdb
// file at path, and the file's page size.
func logsRoot(t *testing.T, path string) (root uint64, pageSize int64) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		if b == nil {
			return errors.New("no logs bucket")
		}
		root = uint64(b.Root())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, int64(db.Info().PageSize)
}

// patch overwrites len(b) bytes of path at off.
func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCheckRaftLogAcceptsIntactAndMissingFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	if err := CheckRaftLog(path); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	fillRaftLog(t, path, 2000, 1<<10, 500)
	if err := CheckRaftLog(path); err != nil {
		t.Fatalf("intact file refused: %v", err)
	}
}

// A branch page of the log that leads back to itself makes bbolt loop for
// ever (seen after a device lost synced pages): the page walk, reading the
// file directly, must refuse it first, naming the page.
func TestCheckRaftLogRefusesCycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	fillRaftLog(t, path, 2000, 1<<10, 2000)
	root, ps := logsRoot(t, path)
	hdr := make([]byte, 16)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(hdr, int64(root)*ps)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if flags := binary.LittleEndian.Uint16(hdr[8:]); flags&0x01 == 0 {
		t.Fatalf("the logs bucket's root page %d is not a branch page (flags %#x): the log is too small", root, flags)
	}
	// The first element of a branch page holds its child's id at byte 8.
	child := make([]byte, 8)
	binary.LittleEndian.PutUint64(child, root)
	patch(t, path, int64(root)*ps+16+8, child)

	err = CheckRaftLog(path)
	want := fmt.Sprintf("points to page %d (offset %d) a second time", root, int64(root)*ps)
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a cycle in the log's pages: got %v, want ErrDamaged naming %s and saying %q", err, path, want)
	}
}

func TestCheckRaftLogRefusesDamagedPages(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, path string, root uint64, ps int64)
		want string
	}{
		{"page of no type", func(t *testing.T, path string, root uint64, ps int64) {
			patch(t, path, int64(root)*ps+8, []byte{0x40, 0})
		}, "not a branch or leaf page"},
		{"element count off the page", func(t *testing.T, path string, root uint64, ps int64) {
			patch(t, path, int64(root)*ps+10, []byte{0xff, 0xff})
		}, "do not fit"},
		{"both meta pages", func(t *testing.T, path string, _ uint64, ps int64) {
			patch(t, path, 16, []byte("not a meta page"))
			patch(t, path, ps+16, []byte("not a meta page"))
		}, "meta page 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "raft.db")
			fillRaftLog(t, path, 500, 1<<10, 500)
			root, ps := logsRoot(t, path)
			tc.harm(t, path, root, ps)
			err := CheckRaftLog(path)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrDamaged saying %q", err, tc.want)
			}
		})
	}
}
