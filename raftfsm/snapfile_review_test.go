package raftfsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
)

// craftFile builds a snapshot file by hand, with a correct checksum over
// whatever body it is given: a file that lies about its content in a way
// the checksum cannot catch, as a buggy writer or a deliberate forger would
// make it.
func craftFile(tb testing.TB, headerJSON string, records ...proto.Message) []byte {
	tb.Helper()
	var b []byte
	b = append(b, fileMagic[:]...)
	b = binary.BigEndian.AppendUint16(b, SnapshotFileVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(headerJSON)))
	b = append(b, headerJSON...)
	b = append(b, craftStream(tb, records...)...)
	sum := sha256.Sum256(b)
	b = append(b, trailerMagic[:]...)
	return append(b, sum[:]...)
}

// craftStream builds a snapshot stream by hand: the magic, then records
// as given (a header first, for a stream that gets past it).
func craftStream(tb testing.TB, records ...proto.Message) []byte {
	tb.Helper()
	b := append([]byte(nil), snapMagic[:]...)
	for _, m := range records {
		enc, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b
}

func procRec(id uint64) *raftpb.SnapshotRecord {
	return &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: &raftpb.Proc{Id: id, Data: []byte("p")}}}
}

func kvRec(k string) *raftpb.SnapshotRecord {
	return &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: &raftpb.KV{Key: []byte(k), Value: []byte("v")}}}
}

func endRec(h *raftpb.SnapshotHeader) *raftpb.SnapshotRecord {
	return &raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_End{End: h}}
}

// A checksum-correct file whose body contradicts itself is refused with
// the offset: the checksum proves the bytes arrived as written, not that
// the writer told the truth, and a restore builds a cluster from them.
func TestSnapshotFileRefusesALyingBody(t *testing.T) {
	hdr := func(procs, keys, maxID uint64) (string, *raftpb.SnapshotHeader) {
		h := &raftpb.SnapshotHeader{Index: 10, Procs: procs, Kvs: keys, MaxProcId: maxID}
		js := `{"index":10,"procs":` + strconv.FormatUint(procs, 10) + `,"keys":` + strconv.FormatUint(keys, 10) + `,"max_proc_id":` + strconv.FormatUint(maxID, 10) + `}`
		return js, h
	}
	cases := map[string]func() []byte{
		"duplicate procedure id": func() []byte {
			js, h := hdr(2, 0, 9)
			return craftFile(t, js, h, procRec(4), procRec(4), endRec(h))
		},
		"keys out of order": func() []byte {
			js, h := hdr(0, 2, 0)
			return craftFile(t, js, h, kvRec("b"), kvRec("a"), endRec(h))
		},
		"duplicate key": func() []byte {
			js, h := hdr(0, 2, 0)
			return craftFile(t, js, h, kvRec("a"), kvRec("a"), endRec(h))
		},
		"a procedure after a key": func() []byte {
			js, h := hdr(1, 1, 9)
			return craftFile(t, js, h, kvRec("a"), procRec(3), endRec(h))
		},
		"end record counts lie": func() []byte {
			js, h := hdr(2, 0, 9)
			return craftFile(t, js, h, procRec(1), endRec(h))
		},
		// A restore takes max_proc_id as the highest id ever given: one
		// below a procedure the file holds makes the restored cluster hand
		// that id out again, to a second procedure.
		"a procedure id above max_proc_id": func() []byte {
			js, h := hdr(1, 0, 3)
			return craftFile(t, js, h, procRec(5), endRec(h))
		},
		"a header record nested as a procedure": func() []byte {
			js, h := hdr(0, 0, 0)
			return craftFile(t, js, h, &raftpb.SnapshotRecord{}, endRec(h))
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := readAll(build())
			var fe *SnapshotFileError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "at offset") {
				t.Fatalf("read: %v, want a *SnapshotFileError naming the offset", err)
			}
			t.Logf("refused: %v", err)
		})
	}
	// The builder itself makes good files.
	js, h := hdr(1, 1, 9)
	if _, _, err := readAll(craftFile(t, js, h, procRec(9), kvRec("a"), endRec(h))); err != nil {
		t.Fatalf("a crafted good file: %v", err)
	}
}

// Header fields that do not fit their types, or lengths beyond any sane
// file, are refused by name, never a panic.
func TestSnapshotFileRefusesOutlandishNumbers(t *testing.T) {
	h := &raftpb.SnapshotHeader{}
	for name, js := range map[string]string{
		"index above 2^64": `{"index":18446744073709551616}`,
		"negative count":   `{"procs":-1}`,
		"float count":      `{"keys":1.5}`,
		"exponent index":   `{"index":1e30}`,
		"not an object":    `[1,2]`,
	} {
		if _, _, err := readAll(craftFile(t, js, h, endRec(h))); err == nil || !strings.Contains(err.Error(), "header at offset 14") {
			t.Errorf("%s: %v, want the header refused at offset 14", name, err)
		}
	}
	// A record length of 2^63.
	b := craftFile(t, `{}`, h)
	b = b[:len(b)-36]
	b = binary.AppendUvarint(b, 1<<63)
	if _, _, err := readAll(b); err == nil || !strings.Contains(err.Error(), "record length at offset") {
		t.Errorf("a record length of 2^63: %v", err)
	}
}

// A file of a few dozen bytes claiming a record just under the record
// limit is refused as truncated without allocating the claimed size: an
// inspect of a tiny damaged file must not take hundreds of MB.
func TestSnapshotFileClaimedRecordLengthNotAllocated(t *testing.T) {
	h := &raftpb.SnapshotHeader{}
	b := craftFile(t, `{}`, h)
	b = b[:len(b)-36]
	b = binary.AppendUvarint(b, maxSnapRecord)
	b = append(b, "only a few bytes"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readAll(b)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("read: %v, want truncated", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("reading a %d-byte file allocated %d MB", len(b), alloc>>20)
	}
}

// Extra bytes after a correct trailer are refused even when they are a
// second whole file.
func TestSnapshotFileRefusesTwoFilesConcatenated(t *testing.T) {
	_, good := sampleFile(t)
	_, _, err := readAll(append(bytes.Clone(good), good...))
	if err == nil || !strings.Contains(err.Error(), "follow the trailer") {
		t.Fatalf("two files end to end: %v", err)
	}
}
