package access

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// A carried record is numbered and encoded as its entry is proposed,
// under the node's Sequencer, which every write of the node waits for;
// and with one entry in Raft at a time (raftfsm.Config.MaxInFlight), what
// runs there lengthens every commit. Carrying a record took 2.1 µs there,
// most of it sanitizing and encoding it: 135 µs of the 3.5 ms commit of
// an entry of 64 submissions (BenchmarkFoldEntry, issue 33). So the
// call's record is prepared as the call starts, outside: sanitized, its
// holder known, and encoded but for what the numbering adds, which the
// fold appends to its bytes (fields may come in any order on the wire).
// Under the Sequencer a record now costs 0.66 µs.

// Prepared is a record made ready to be carried (Prepare).
type Prepared struct {
	rec *adminpb.AuditRecord
	// holder is the record's groups in the trail's first space, joined:
	// the run of a fold it goes into.
	holder string
	// wire is rec encoded without id, committed_unix_ms and proc_ids,
	// which the fold appends (appendOwn), and without the fields a
	// group's records share (shared); nil: encoded whole there.
	wire []byte
	// shared is rec's fields a group's records may share, each present
	// even when empty (appendShared).
	shared []byte
}

// Record is the record p carries: numbered once its entry is folded.
func (p *Prepared) Record() *adminpb.AuditRecord { return p.rec }

// The fields of adminpb.AuditRecord the numbering sets or the carrying
// adds, left out of Prepared.wire.
var (
	recordFields   = (&adminpb.AuditRecord{}).ProtoReflect().Descriptor().Fields()
	recordIDField  = recordFields.ByName("id").Number()
	recordProcsFld = recordFields.ByName("proc_ids").Number()
)

// procIDsMax is the most procedure ids a record keeps (SanitizeRecord).
const procIDsMax = 100

// Prepare readies rec, the final record of a call the leader serves, to
// be carried in the entry of what the call does (CarryPrepared). It
// sanitizes rec and clears its id; rec must change after only through
// CarryPrepared. Prepare does not need the Sequencer, nor the trail to
// be the leader's.
func (l *Trail) Prepare(rec *adminpb.AuditRecord) *Prepared {
	l.sanitize(rec)
	rec.Id = "" // numbered as carried, whatever it held
	p := &Prepared{rec: rec, holder: strings.Join(l.spaces[0].GroupsFor(rec), "\x00")}
	p.shared = appendShared(nil, rec)
	// Encoded with what the numbering adds and the shared fields left
	// out (a field added to records later is kept).
	committed, procs := rec.CommittedUnixMs, rec.ProcIds
	principal, name, method, code, node, peer, via, refused := rec.Principal, rec.Name, rec.Method, rec.Code, rec.Node, rec.Peer, rec.Via, rec.Refused
	rec.CommittedUnixMs, rec.ProcIds = 0, nil
	rec.Principal, rec.Name, rec.Method, rec.Code, rec.Node, rec.Peer, rec.Via, rec.Refused = "", "", "", "", "", "", "", false
	if b, err := proto.Marshal(rec); err == nil {
		p.wire = b
	}
	rec.CommittedUnixMs, rec.ProcIds = committed, procs
	rec.Principal, rec.Name, rec.Method, rec.Code, rec.Node, rec.Peer, rec.Via, rec.Refused = principal, name, method, code, node, peer, via, refused
	return p
}

// The fields of a record a group's records may share (common), as
// appendShared encodes them.
var (
	sharedStrings = []struct {
		num protowire.Number
		get func(*adminpb.AuditRecord) string
	}{
		{recordFields.ByName("principal").Number(), (*adminpb.AuditRecord).GetPrincipal},
		{recordFields.ByName("name").Number(), (*adminpb.AuditRecord).GetName},
		{recordFields.ByName("method").Number(), (*adminpb.AuditRecord).GetMethod},
		{recordFields.ByName("code").Number(), (*adminpb.AuditRecord).GetCode},
		{recordFields.ByName("node").Number(), (*adminpb.AuditRecord).GetNode},
		{recordFields.ByName("peer").Number(), (*adminpb.AuditRecord).GetPeer},
		{recordFields.ByName("via").Number(), (*adminpb.AuditRecord).GetVia},
	}
	refusedField = recordFields.ByName("refused").Number()
)

// appendShared appends rec's shared fields to b, each present even when
// empty or false: decoded after a group's common, they replace every one
// of its values.
func appendShared(b []byte, rec *adminpb.AuditRecord) []byte {
	for _, f := range sharedStrings {
		b = protowire.AppendTag(b, f.num, protowire.BytesType)
		b = protowire.AppendString(b, f.get(rec))
	}
	b = protowire.AppendTag(b, refusedField, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(rec.GetRefused()))
}

// CarryPrepared is Carry for a prepared record, which gains procID (0:
// none) among its procedure ids first: the id of the procedure the call
// submits, known only as its entry is proposed.
func (l *Trail) CarryPrepared(p *Prepared, procID uint64) (muts []raftfsm.Mutation, done func(error), ok bool) {
	if !l.CanCarry() || !l.state.IsLeader() {
		return nil, nil, false
	}
	rec := p.rec
	rec.Id = "" // numbered as carried, whatever a carrying before gave it
	if procID != 0 && len(rec.ProcIds) < procIDsMax && !slices.Contains(rec.ProcIds, procID) {
		rec.ProcIds = append(rec.ProcIds, procID)
	}
	if l.grouping(rec) {
		return l.hold(p), func(error) {}, true // the entry's fold settles it
	}
	w, err := l.number([]*adminpb.AuditRecord{rec}, false)
	if err != nil {
		l.failed.Inc()
		l.cfg.Log.Error("audit record not carried", "method", rec.GetMethod(), "error", err)
		return nil, nil, false
	}
	return w.all(), func(err error) { l.settle(w, err) }, true
}

// numberedID is the id of record n of term.
func numberedID(term, n uint64) string {
	return strconv.FormatUint(term, 10) + "-" + strconv.FormatUint(n, 10)
}

// appendGroup appends to b the stored form of a group of run, numbered
// already, newest committed at committedUnixMs: each record as what it
// does not share with the group's common fields, those of its first
// record (AuditRecordGroup.common). Its records' ids are left to the
// key's range, and their commit times to the group's where they are the
// same.
func appendGroup(b []byte, run []*Prepared, committedUnixMs int64) ([]byte, error) {
	common := run[0].shared
	b = protowire.AppendTag(b, groupCommonField, protowire.BytesType)
	b = protowire.AppendBytes(b, common)
	for _, p := range run {
		var err error
		if b, err = p.appendOwn(b, common, committedUnixMs); err != nil {
			return nil, err
		}
	}
	return appendGroupCommitted(b, committedUnixMs), nil
}

// groupSize is the size of appendGroup's stored form of run.
func groupSize(run []*Prepared, committedUnixMs int64) int {
	common := run[0].shared
	n := protowire.SizeTag(groupCommonField) + protowire.SizeBytes(len(common))
	for _, p := range run {
		n += protowire.SizeTag(groupRecordsField) + protowire.SizeBytes(p.ownSize(common, committedUnixMs))
	}
	return n + protowire.SizeTag(groupCommittedField) + protowire.SizeVarint(uint64(committedUnixMs))
}

// appendOwn appends p's record to b as a group with common fields
// common, newest committed at committedUnixMs, keeps it (appendGroup):
// its shared fields if they are not common, its prepared bytes, its
// commit time if it is not the group's, and its procedure ids.
func (p *Prepared) appendOwn(b, common []byte, committedUnixMs int64) ([]byte, error) {
	rec := p.rec
	if p.wire == nil {
		enc, err := proto.Marshal(rec)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, groupRecordsField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(p.shared)+len(enc)))
		return append(append(b, p.shared...), enc...), nil
	}
	b = protowire.AppendTag(b, groupRecordsField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(p.ownSize(common, committedUnixMs)))
	if !bytes.Equal(p.shared, common) {
		b = append(b, p.shared...)
	}
	b = append(b, p.wire...)
	if rec.CommittedUnixMs != committedUnixMs {
		b = protowire.AppendTag(b, committedField, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(rec.CommittedUnixMs))
	}
	return appendProcIDs(b, rec.ProcIds), nil
}

// ownSize is the size of what appendOwn appends for p after its tag and
// length.
func (p *Prepared) ownSize(common []byte, committedUnixMs int64) int {
	rec := p.rec
	if p.wire == nil {
		return len(p.shared) + proto.Size(rec)
	}
	n := len(p.wire)
	if !bytes.Equal(p.shared, common) {
		n += len(p.shared)
	}
	if rec.CommittedUnixMs != committedUnixMs {
		n += protowire.SizeTag(committedField) + protowire.SizeVarint(uint64(rec.CommittedUnixMs))
	}
	if len(rec.ProcIds) > 0 {
		n += protowire.SizeTag(recordProcsFld) + protowire.SizeBytes(packedSize(rec.ProcIds))
	}
	return n
}

// appendProcIDs appends ids as proto.Marshal would encode a record's
// proc_ids (packed) to b.
func appendProcIDs(b []byte, ids []uint64) []byte {
	if len(ids) > 0 {
		b = protowire.AppendTag(b, recordProcsFld, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(packedSize(ids)))
		for _, id := range ids {
			b = protowire.AppendVarint(b, id)
		}
	}
	return b
}

func packedSize(ids []uint64) int {
	n := 0
	for _, id := range ids {
		n += protowire.SizeVarint(id)
	}
	return n
}
