package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/baton-dev/baton/proto/raftpb"
)

// FuzzSnapshotFileReader feeds the snapshot file reader arbitrary bytes:
// it never panics, refuses with a *SnapshotFileError, and what it accepts
// keeps the promises a restore relies on (procedures by id, none above the
// max id, keys in order, the counts the header states).
func FuzzSnapshotFileReader(f *testing.F) {
	_, good := sampleFile(f)
	f.Add(good)
	h := &raftpb.SnapshotHeader{Index: 3, Procs: 1, Kvs: 1, MaxProcId: 4}
	f.Add(craftFile(f, `{"index":3,"procs":1,"keys":1,"max_proc_id":4}`, h, procRec(4), kvRec("k"), endRec(h)))
	empty := &raftpb.SnapshotHeader{}
	f.Add(craftFile(f, `{}`, empty, endRec(empty)))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := OpenSnapshotFile(bytes.NewReader(b))
		if err != nil {
			var fe *SnapshotFileError
			if !errors.As(err, &fe) {
				t.Fatalf("open: %v is not a *SnapshotFileError", err)
			}
			return
		}
		hdr := sr.Header()
		var procs, keys, lastID uint64
		var lastKey string
		for {
			e, err := sr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var fe *SnapshotFileError
				if !errors.As(err, &fe) {
					t.Fatalf("next: %v is not a *SnapshotFileError", err)
				}
				if _, again := sr.Next(); again == nil || again.Error() != err.Error() {
					t.Fatalf("after %v, Next returned %v", err, again)
				}
				return
			}
			if e.Proc != nil {
				if keys > 0 || e.Proc.ID <= lastID || e.Proc.ID > hdr.MaxProcID {
					t.Fatalf("accepted procedure %d after %d (%d keys read, max id %d)", e.Proc.ID, lastID, keys, hdr.MaxProcID)
				}
				lastID = e.Proc.ID
				procs++
				continue
			}
			if e.Key == "" || (keys > 0 && e.Key <= lastKey) {
				t.Fatalf("accepted key %q after %q", e.Key, lastKey)
			}
			lastKey = e.Key
			keys++
		}
		if procs != hdr.Procs || keys != hdr.Keys {
			t.Fatalf("accepted %d procedures and %d keys; the header says %d and %d", procs, keys, hdr.Procs, hdr.Keys)
		}
	})
}
