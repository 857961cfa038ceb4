package access

import (
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
	// which the fold appends (appendNumbered); nil: encoded whole there.
	wire []byte
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
	SanitizeRecord(rec)
	rec.Id = "" // numbered as carried, whatever it held
	p := &Prepared{rec: rec, holder: strings.Join(l.spaces[0].GroupsFor(rec), "\x00")}
	committed, procs := rec.CommittedUnixMs, rec.ProcIds
	rec.CommittedUnixMs, rec.ProcIds = 0, nil
	if b, err := proto.Marshal(rec); err == nil {
		p.wire = b
	}
	rec.CommittedUnixMs, rec.ProcIds = committed, procs
	return p
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
// already, newest committed at committedUnixMs: MarshalGroup's, each
// record's bytes made from its prepared ones.
func appendGroup(b []byte, run []*Prepared, committedUnixMs int64) ([]byte, error) {
	for _, p := range run {
		if p.wire == nil {
			enc, err := proto.Marshal(p.rec)
			if err != nil {
				return nil, err
			}
			b = appendGroupRecord(b, enc)
			continue
		}
		b = protowire.AppendTag(b, groupRecordsField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(p.size()))
		b = appendNumbered(append(b, p.wire...), p.rec)
	}
	return appendGroupCommitted(b, committedUnixMs), nil
}

// size is the size of p's record as appendGroup encodes it, once
// numbered.
func (p *Prepared) size() int {
	if p.wire == nil {
		return proto.Size(p.rec)
	}
	return len(p.wire) + numberedSize(p.rec)
}

// numberedSize is the size of the fields appendNumbered appends for rec.
func numberedSize(rec *adminpb.AuditRecord) int {
	n := 0
	if rec.Id != "" {
		n += protowire.SizeTag(recordIDField) + protowire.SizeBytes(len(rec.Id))
	}
	if rec.CommittedUnixMs != 0 {
		n += protowire.SizeTag(committedField) + protowire.SizeVarint(uint64(rec.CommittedUnixMs))
	}
	if len(rec.ProcIds) > 0 {
		n += protowire.SizeTag(recordProcsFld) + protowire.SizeBytes(packedSize(rec.ProcIds))
	}
	return n
}

// appendNumbered appends rec's id, committed_unix_ms and proc_ids, as
// proto.Marshal would encode them (proc_ids packed), to b.
func appendNumbered(b []byte, rec *adminpb.AuditRecord) []byte {
	if rec.Id != "" {
		b = protowire.AppendTag(b, recordIDField, protowire.BytesType)
		b = protowire.AppendString(b, rec.Id)
	}
	if rec.CommittedUnixMs != 0 {
		b = protowire.AppendTag(b, committedField, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(rec.CommittedUnixMs))
	}
	if len(rec.ProcIds) > 0 {
		b = protowire.AppendTag(b, recordProcsFld, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(packedSize(rec.ProcIds)))
		for _, id := range rec.ProcIds {
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
