package raftfsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
)

// StreamWriter writes a snapshot stream (the format at the top of
// snapshot.go) entry by entry, from entries that are not an FSM state: a
// restore copies a snapshot file's body into a raft snapshot, leaving out
// or changing some keys. The header holds the counts, so they are given up
// front; Close refuses a stream that did not hold them, and Proc and Key
// refuse entries out of order, so what it writes is what Restore accepts.
// Memory stays bounded by a small buffer and one record.
type StreamWriter struct {
	bw      *bufio.Writer
	hdr     *raftpb.SnapshotHeader
	buf     []byte
	nProcs  uint64
	nKeys   uint64
	lastID  uint64
	lastKey string
	proc    raftpb.Proc
	kv      raftpb.KV
}

// NewStreamWriter starts a stream of a state at Raft index index, with
// maxProcID the highest procedure id ever seen, holding procs procedures
// and keys keys.
func NewStreamWriter(w io.Writer, index, maxProcID, procs, keys uint64) (*StreamWriter, error) {
	s := &StreamWriter{
		bw:  bufio.NewWriterSize(w, 64<<10),
		hdr: &raftpb.SnapshotHeader{Index: index, MaxProcId: maxProcID, Procs: procs, Kvs: keys},
	}
	if _, err := s.bw.Write(snapMagic[:]); err != nil {
		return nil, fmt.Errorf("raftfsm: write snapshot: %w", err)
	}
	if err := s.put(s.hdr); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *StreamWriter) put(m proto.Message) error {
	var err error
	s.buf = binary.AppendUvarint(s.buf[:0], uint64(proto.Size(m)))
	if s.buf, err = (proto.MarshalOptions{}).MarshalAppend(s.buf, m); err != nil {
		return fmt.Errorf("raftfsm: encode snapshot record: %w", err)
	}
	if _, err := s.bw.Write(s.buf); err != nil {
		return fmt.Errorf("raftfsm: write snapshot: %w", err)
	}
	return nil
}

// Proc writes a procedure record. Procedures come first, by id.
func (s *StreamWriter) Proc(id uint64, data []byte) error {
	if err := checkProcID(id); err != nil {
		return fmt.Errorf("raftfsm: snapshot stream: %w", err)
	}
	if s.nKeys > 0 || (s.nProcs > 0 && id <= s.lastID) {
		return fmt.Errorf("raftfsm: snapshot stream: procedure %d out of order (after procedure %d, or after a key)", id, s.lastID)
	}
	if s.nProcs == s.hdr.Procs {
		return fmt.Errorf("raftfsm: snapshot stream: more than the %d procedures announced", s.hdr.Procs)
	}
	if id > s.hdr.MaxProcId {
		// Restore refuses it: a node would load a state whose next id
		// could be one already taken.
		return fmt.Errorf("raftfsm: snapshot stream: procedure %d above the max id %d announced", id, s.hdr.MaxProcId)
	}
	s.lastID = id
	s.nProcs++
	s.proc.Id, s.proc.Data = id, data
	return s.put(&raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Proc{Proc: &s.proc}})
}

// Key writes a domain key's record. Keys follow the procedures, in order.
func (s *StreamWriter) Key(key string, val []byte) error {
	if key == "" {
		return fmt.Errorf("raftfsm: snapshot stream: empty key")
	}
	if s.nKeys > 0 && key <= s.lastKey {
		return fmt.Errorf("raftfsm: snapshot stream: key %q out of order (after %q)", key, s.lastKey)
	}
	if s.nKeys == s.hdr.Kvs {
		return fmt.Errorf("raftfsm: snapshot stream: more than the %d keys announced", s.hdr.Kvs)
	}
	s.lastKey = key
	s.nKeys++
	s.kv.Key, s.kv.Value = []byte(key), val
	return s.put(&raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_Kv{Kv: &s.kv}})
}

// Close writes the end record and flushes; it refuses a stream that does
// not hold the counts announced.
func (s *StreamWriter) Close() error {
	if s.nProcs != s.hdr.Procs || s.nKeys != s.hdr.Kvs {
		return fmt.Errorf("raftfsm: snapshot stream: %d procedures and %d keys written, %d and %d announced", s.nProcs, s.nKeys, s.hdr.Procs, s.hdr.Kvs)
	}
	if err := s.put(&raftpb.SnapshotRecord{Rec: &raftpb.SnapshotRecord_End{End: s.hdr}}); err != nil {
		return err
	}
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("raftfsm: write snapshot: %w", err)
	}
	return nil
}
