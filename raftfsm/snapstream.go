package raftfsm

// Reading a snapshot stream (the format at the top of snapshot.go): what
// Restore reads from raft, and the body of a snapshot file (snapfile.go).
// One reader serves both, so that a stream raft hands a member is checked
// as strictly as a file an operator restores.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
)

// recordReadStep is how much of a record is read before the buffer grows
// for more.
const recordReadStep = 1 << 20

// offsetReader counts the bytes handed on and, with sum set, hashes them:
// a snapshot file's checksum covers what was consumed, not what the
// buffer read ahead.
type offsetReader struct {
	r   *bufio.Reader
	off int64
	sum hash.Hash // nil: not hashed
}

func newOffsetReader(r io.Reader, sum hash.Hash) *offsetReader {
	return &offsetReader{r: bufio.NewReaderSize(r, 64<<10), sum: sum}
}

func (o *offsetReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if o.sum != nil {
		o.sum.Write(p[:n])
	}
	o.off += int64(n)
	return n, err
}

func (o *offsetReader) ReadByte() (byte, error) {
	b, err := o.r.ReadByte()
	if err == nil {
		if o.sum != nil {
			o.sum.Write([]byte{b})
		}
		o.off++
	}
	return b, err
}

// readFull fills p, or names field and where it began in the error.
func (o *offsetReader) readFull(p []byte, field string) error {
	at := o.off
	if _, err := io.ReadFull(o, p); err != nil {
		return &SnapshotFileError{Offset: at, Field: field, Err: truncated(err)}
	}
	return nil
}

// truncated names an end of file met inside a field.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("file ends here (truncated): %w", io.ErrUnexpectedEOF)
	}
	return err
}

// streamReader reads a snapshot stream: openStream its magic and header,
// next its entries, checked as they come (procedures first, by id, none
// above the header's max id; then keys, in order), up to its end record,
// checked against the header and the counts read. Its errors are
// *SnapshotFileError, naming the offset in its input and the field read
// there; Restore turns them into ErrBadSnapshot.
type streamReader struct {
	in      *offsetReader
	hdr     *raftpb.SnapshotHeader
	buf     []byte
	rec     raftpb.SnapshotRecord
	nProcs  uint64
	nKeys   uint64
	lastID  uint64
	lastKey string
}

// openStream reads a stream's magic and header from in; part prefixes the
// fields they are named by in an error ("body " in a snapshot file).
func openStream(in *offsetReader, part string) (*streamReader, error) {
	sr := &streamReader{in: in}
	at := in.off
	var m [4]byte
	if err := in.readFull(m[:], part+"magic"); err != nil {
		return nil, err
	}
	if m != snapMagic {
		return nil, &SnapshotFileError{Offset: at, Field: part + "magic", Err: fmt.Errorf("% x, want % x", m[:], snapMagic[:])}
	}
	sr.hdr = &raftpb.SnapshotHeader{}
	if err := sr.record(sr.hdr, part+"header"); err != nil {
		return nil, err
	}
	return sr, nil
}

// record reads one length-prefixed record into m.
func (sr *streamReader) record(m proto.Message, field string) error {
	at := sr.in.off
	n, err := binary.ReadUvarint(sr.in)
	if err != nil {
		return &SnapshotFileError{Offset: at, Field: field + " length", Err: truncated(err)}
	}
	if n > maxSnapRecord {
		return &SnapshotFileError{Offset: at, Field: field + " length", Err: fmt.Errorf("%d bytes exceeds %d", n, maxSnapRecord)}
	}
	// The buffer grows as the bytes arrive, not to the length read: a
	// damaged or cut stream of a few bytes may claim up to maxSnapRecord.
	sr.buf = sr.buf[:0]
	for left := n; left > 0; {
		k := int(min(left, recordReadStep))
		from := len(sr.buf)
		sr.buf = slices.Grow(sr.buf, k)[:from+k]
		if err := sr.in.readFull(sr.buf[from:], field); err != nil {
			return err
		}
		left -= uint64(k)
	}
	if err := proto.Unmarshal(sr.buf, m); err != nil {
		return &SnapshotFileError{Offset: at, Field: field, Err: err}
	}
	return nil
}

// next returns the next entry, or io.EOF once the end record is read and
// matches the header and the counts.
func (sr *streamReader) next() (SnapshotEntry, error) {
	at := sr.in.off
	sr.rec.Reset()
	if err := sr.record(&sr.rec, "record"); err != nil {
		return SnapshotEntry{}, err
	}
	bad := func(field string, format string, args ...any) error {
		return &SnapshotFileError{Offset: at, Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch r := sr.rec.Rec.(type) {
	case *raftpb.SnapshotRecord_Proc:
		if err := checkProcID(r.Proc.Id); err != nil {
			return SnapshotEntry{}, bad("procedure record", "%w", err)
		}
		if sr.nKeys > 0 || r.Proc.Id <= sr.lastID {
			return SnapshotEntry{}, bad("procedure record", "procedure %d out of order (after procedure %d, or after a key)", r.Proc.Id, sr.lastID)
		}
		if r.Proc.Id > sr.hdr.MaxProcId {
			// A restore takes max_proc_id as the highest id ever given,
			// and would give this one again.
			return SnapshotEntry{}, bad("procedure record", "procedure %d above the body header's max id %d", r.Proc.Id, sr.hdr.MaxProcId)
		}
		sr.lastID = r.Proc.Id
		sr.nProcs++
		return SnapshotEntry{Proc: &store.Proc{ID: r.Proc.Id, Data: r.Proc.Data}}, nil
	case *raftpb.SnapshotRecord_Kv:
		key := string(r.Kv.Key)
		if key == "" {
			return SnapshotEntry{}, bad("key record", "empty key")
		}
		if sr.nKeys > 0 && key <= sr.lastKey {
			return SnapshotEntry{}, bad("key record", "key %q out of order (after %q)", key, sr.lastKey)
		}
		sr.lastKey = key
		sr.nKeys++
		return SnapshotEntry{Key: key, Value: r.Kv.Value}, nil
	case *raftpb.SnapshotRecord_End:
		end, b := r.End, sr.hdr
		if end.Index != b.Index || end.Procs != sr.nProcs || end.Kvs != sr.nKeys || end.Procs != b.Procs || end.Kvs != b.Kvs {
			return SnapshotEntry{}, bad("end record", "index %d, %d procedures, %d keys; the body header says index %d, %d procedures, %d keys, and %d procedures and %d keys were read",
				end.Index, end.Procs, end.Kvs, b.Index, b.Procs, b.Kvs, sr.nProcs, sr.nKeys)
		}
		return SnapshotEntry{}, io.EOF
	default:
		return SnapshotEntry{}, bad("record", "unknown record kind")
	}
}
