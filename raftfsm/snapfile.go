package raftfsm

// Snapshot files: what `baton snapshot save` writes and `snapshot inspect`
// (and a restore) reads. The file wraps the FSM's snapshot stream
// (snapshot.go) between a header saying what it is and a checksum, so
// that a file is judged whole before anything is taken from it.
//
// Layout (integers big-endian):
//
//	offset 0    8 bytes   magic "BATONSNP"
//	offset 8    2 bytes   file format version (SnapshotFileVersion)
//	offset 10   4 bytes   header length n, at most maxFileHeader
//	offset 14   n bytes   header: JSON, SnapshotFileHeader (snake_case keys)
//	then                  body: the snapshot stream, "BTS\x01", its header,
//	                      the procedures, the keys, its end record
//	then        4 bytes   trailer magic "BTSC"
//	            32 bytes  SHA-256 of every byte before the trailer
//	then end of file
//
// The body delimits itself (its end record), so the writer needs no length
// up front and streams it. A reader checks the structure as it goes and
// the checksum at the end: a restore must not treat the state as good
// before Next has returned io.EOF. A later version of the file is a new
// version number: this one's layout never changes; its header may gain
// keys, which a reader of this version ignores.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/baton-dev/baton/store"
)

// SnapshotFileVersion is the version of the snapshot file layout this
// binary writes and reads.
const SnapshotFileVersion = 1

var (
	fileMagic    = [8]byte{'B', 'A', 'T', 'O', 'N', 'S', 'N', 'P'}
	trailerMagic = [4]byte{'B', 'T', 'S', 'C'}
)

const (
	filePrefixLen = 8 + 2 + 4
	maxFileHeader = 64 << 10
)

// SnapshotFileHeader says what a snapshot file holds and where it came
// from.
type SnapshotFileHeader struct {
	// ClusterID is the cluster's id as the state holds it ("" when the
	// cluster has none yet: before its cluster version reached 2).
	ClusterID string `json:"cluster_id"`
	// Index is the Raft index of the last entry the state reflects;
	// Term the leader's term when it was read (a linearizable read).
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// CreatedUnixMs is when the leader read the state.
	CreatedUnixMs int64 `json:"created_unix_ms"`
	// TakenBy is the principal that asked ("client/alice", "token/…",
	// "anonymous"); ServedBy the master that read it, the leader.
	TakenBy  string `json:"taken_by"`
	ServedBy string `json:"served_by"`
	// Version is ServedBy's binary; ClusterFormat the cluster version the
	// state holds.
	Version       string `json:"version"`
	ClusterFormat uint32 `json:"cluster_format"`
	// What the body holds, repeated from its own header.
	Procs     uint64 `json:"procs"`
	Keys      uint64 `json:"keys"`
	MaxProcID uint64 `json:"max_proc_id"`
}

// ErrBadSnapshotFile is wrapped by every refusal of a snapshot file (a
// *SnapshotFileError).
var ErrBadSnapshotFile = errors.New("raftfsm: bad snapshot file")

// SnapshotFileError names where a snapshot file is bad: the byte offset
// and the field read there.
type SnapshotFileError struct {
	Offset int64
	Field  string
	Err    error
}

func (e *SnapshotFileError) Error() string {
	return fmt.Sprintf("snapshot file: %s at offset %d: %v", e.Field, e.Offset, e.Err)
}

func (e *SnapshotFileError) Unwrap() []error { return []error{ErrBadSnapshotFile, e.Err} }

// WriteSnapshotFile writes v as a snapshot file with header h to w. The
// counts and index of h are taken from v. Memory stays bounded as the
// stream's (View.WriteSnapshot).
func WriteSnapshotFile(w io.Writer, h SnapshotFileHeader, v View) error {
	h.Index, h.MaxProcID = v.Index(), v.MaxProcID()
	h.Procs, h.Keys = uint64(v.NumProcs()), uint64(v.NumKeys())
	js, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("raftfsm: encode snapshot file header: %w", err)
	}
	if len(js) > maxFileHeader {
		return fmt.Errorf("raftfsm: snapshot file header of %d bytes exceeds %d", len(js), maxFileHeader)
	}
	sum := sha256.New()
	hw := io.MultiWriter(w, sum)
	prefix := make([]byte, 0, filePrefixLen+len(js))
	prefix = append(prefix, fileMagic[:]...)
	prefix = binary.BigEndian.AppendUint16(prefix, SnapshotFileVersion)
	prefix = binary.BigEndian.AppendUint32(prefix, uint32(len(js)))
	prefix = append(prefix, js...)
	if _, err := hw.Write(prefix); err != nil {
		return fmt.Errorf("raftfsm: write snapshot file: %w", err)
	}
	if err := v.WriteSnapshot(hw); err != nil {
		return err
	}
	trailer := append(trailerMagic[:], sum.Sum(nil)...)
	if _, err := w.Write(trailer); err != nil {
		return fmt.Errorf("raftfsm: write snapshot file: %w", err)
	}
	return nil
}

// SnapshotEntry is one item of a snapshot file's state: a procedure
// record (Proc set) or a domain key and its value.
type SnapshotEntry struct {
	Proc  *store.Proc
	Key   string
	Value []byte
}

// SnapshotFileReader reads a snapshot file: Open checks its header, Next
// returns its entries in order (procedures by id, then keys in order) and
// io.EOF once the end record and the checksum are verified. Until then the
// entries must not be taken as good.
type SnapshotFileReader struct {
	in     *offsetReader
	header SnapshotFileHeader
	body   *streamReader
	done   bool
	err    error
}

// OpenSnapshotFile reads a snapshot file's header and the body's own
// header from r, refusing a file that is not one (a *SnapshotFileError).
func OpenSnapshotFile(r io.Reader) (*SnapshotFileReader, error) {
	sr := &SnapshotFileReader{in: newOffsetReader(r, sha256.New())}
	var prefix [filePrefixLen]byte
	if err := sr.in.readFull(prefix[:8], "magic"); err != nil {
		return nil, err
	}
	if !bytes.Equal(prefix[:8], fileMagic[:]) {
		why := fmt.Errorf("% x, want % x (%q): not a Baton snapshot file", prefix[:8], fileMagic[:], fileMagic[:])
		if bytes.HasPrefix(prefix[:], snapMagic[:]) {
			why = fmt.Errorf("%q is the start of a raft snapshot's state (state.bin), not of a snapshot file: save one with 'baton snapshot save'", prefix[:4])
		}
		return nil, &SnapshotFileError{Offset: 0, Field: "magic", Err: why}
	}
	if err := sr.in.readFull(prefix[8:], "format version and header length"); err != nil {
		return nil, err
	}
	if v := binary.BigEndian.Uint16(prefix[8:10]); v != SnapshotFileVersion {
		return nil, &SnapshotFileError{Offset: 8, Field: "format version", Err: fmt.Errorf("version %d; this binary reads version %d", v, SnapshotFileVersion)}
	}
	n := binary.BigEndian.Uint32(prefix[10:14])
	if n == 0 || n > maxFileHeader {
		return nil, &SnapshotFileError{Offset: 10, Field: "header length", Err: fmt.Errorf("%d bytes, want 1 to %d", n, maxFileHeader)}
	}
	js := make([]byte, n)
	if err := sr.in.readFull(js, "header"); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &sr.header); err != nil {
		return nil, &SnapshotFileError{Offset: filePrefixLen, Field: "header", Err: err}
	}
	bodyAt := sr.in.off
	body, err := openStream(sr.in, "body ")
	if err != nil {
		return nil, err
	}
	sr.body = body
	h := sr.header
	if b := body.hdr; b.Index != h.Index || b.Procs != h.Procs || b.Kvs != h.Keys || b.MaxProcId != h.MaxProcID {
		return nil, &SnapshotFileError{Offset: bodyAt + 4, Field: "body header", Err: fmt.Errorf("index %d, %d procedures, %d keys, max id %d; the file header says index %d, %d procedures, %d keys, max id %d",
			b.Index, b.Procs, b.Kvs, b.MaxProcId, h.Index, h.Procs, h.Keys, h.MaxProcID)}
	}
	return sr, nil
}

// Header is the file's header.
func (sr *SnapshotFileReader) Header() SnapshotFileHeader { return sr.header }

// Offset is how many bytes of the file were read so far.
func (sr *SnapshotFileReader) Offset() int64 { return sr.in.off }

// Next returns the next entry, or io.EOF once the whole file is read and
// verified: the end record matches the counts, the checksum matches, and
// nothing follows the trailer. Any other error is a *SnapshotFileError (or
// the reader's own) and is returned again by every later call.
func (sr *SnapshotFileReader) Next() (SnapshotEntry, error) {
	if sr.err != nil {
		return SnapshotEntry{}, sr.err
	}
	if sr.done {
		return SnapshotEntry{}, io.EOF
	}
	e, err := sr.advance()
	if err != nil {
		if err == io.EOF {
			sr.done = true
		} else {
			sr.err = err
		}
	}
	return e, err
}

func (sr *SnapshotFileReader) advance() (SnapshotEntry, error) {
	e, err := sr.body.next()
	if err == io.EOF {
		return SnapshotEntry{}, sr.verifyTrailer()
	}
	return e, err
}

// verifyTrailer checks the checksum after the end record and that the file
// ends there: io.EOF when it does.
func (sr *SnapshotFileReader) verifyTrailer() error {
	want := sr.in.sum.Sum(nil)
	at := sr.in.off
	var t [4 + sha256.Size]byte
	if err := sr.in.readFull(t[:], "trailer"); err != nil {
		return err
	}
	if !bytes.Equal(t[:4], trailerMagic[:]) {
		return &SnapshotFileError{Offset: at, Field: "trailer magic", Err: fmt.Errorf("% x, want % x", t[:4], trailerMagic[:])}
	}
	if !bytes.Equal(t[4:], want) {
		return &SnapshotFileError{Offset: at + 4, Field: "checksum", Err: fmt.Errorf("SHA-256 of bytes 0 to %d is %x, the file says %x: the file was changed or damaged", at, want, t[4:])}
	}
	end := sr.in.off
	if n, _ := io.Copy(io.Discard, sr.in); n > 0 {
		return &SnapshotFileError{Offset: end, Field: "end of file", Err: fmt.Errorf("%d bytes follow the trailer", n)}
	}
	return io.EOF
}

// VerifySnapshotFile reads a snapshot file through, as a restore would,
// and returns its header once its structure and checksum are verified;
// otherwise the reader's refusal (a *SnapshotFileError).
func VerifySnapshotFile(r io.Reader) (SnapshotFileHeader, error) {
	sr, err := OpenSnapshotFile(r)
	if err != nil {
		return SnapshotFileHeader{}, err
	}
	for {
		if _, err := sr.Next(); err == io.EOF {
			return sr.Header(), nil
		} else if err != nil {
			return sr.Header(), err
		}
	}
}
