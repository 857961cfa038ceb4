package access

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Audit record groups (adminpb.AuditRecordGroup): the records of served
// calls one Raft entry carries, stored as one key
// audit/<term>-<first>+<last>, numbered first to last. A group's range
// never overlaps another key's, so records ordered by their own suffix
// are the keys in order, each group opened in place; every reader of the
// trail goes through the functions here and sees records alone.

// groupMark separates a group's first number from its last in its key.
// It sorts before every digit, so a group's key sorts just after its
// first record's suffix and before the next number's.
const groupMark = "+"

// The field numbers of adminpb.AuditRecordGroup. Its committed_unix_ms
// has a record's number, so that the retention reads both alike
// (committedUnixMs).
var (
	groupFields         = (&adminpb.AuditRecordGroup{}).ProtoReflect().Descriptor().Fields()
	groupRecordsField   = groupFields.ByName("records").Number()
	groupCommittedField = groupFields.ByName("committed_unix_ms").Number()
	groupCommonField    = groupFields.ByName("common").Number()
)

// AuditGroupSuffix is the key suffix of the group holding the records
// term-first to term-last.
func AuditGroupSuffix(term, first, last uint64) string {
	return AuditSuffix(term, first) + groupMark + fmt.Sprintf("%010d", last)
}

// parseGroupSuffix is the range of the group stored under suffix; ok is
// false for a suffix of a record alone, or of no form the trail writes.
func parseGroupSuffix(suffix string) (term, first, last uint64, ok bool) {
	head, tail, found := strings.Cut(suffix, groupMark)
	if !found || len(head) != 31 || head[20] != '-' || len(tail) != 10 {
		return 0, 0, 0, false
	}
	var errs [3]error
	term, errs[0] = strconv.ParseUint(head[:20], 10, 64)
	first, errs[1] = strconv.ParseUint(head[21:], 10, 64)
	last, errs[2] = strconv.ParseUint(tail, 10, 64)
	for _, err := range errs {
		if err != nil {
			return 0, 0, 0, false
		}
	}
	if last < first {
		return 0, 0, 0, false
	}
	return term, first, last, true
}

// MarshalGroup is the stored form of a group of records already encoded
// (each an encoded adminpb.AuditRecord, whole), newest committed at
// committedUnixMs, without common fields: the form development builds of
// 0.2.0 wrote before AuditRecordGroup.common, which every reader still
// reads (the trail itself writes appendGroup's). Tests write it.
func MarshalGroup(records [][]byte, committedUnixMs int64) []byte {
	n := protowire.SizeTag(groupCommittedField) + protowire.SizeVarint(uint64(committedUnixMs))
	for _, r := range records {
		n += protowire.SizeTag(groupRecordsField) + protowire.SizeBytes(len(r))
	}
	b := make([]byte, 0, n)
	for _, r := range records {
		b = appendGroupRecord(b, r)
	}
	return appendGroupCommitted(b, committedUnixMs)
}

// appendGroupRecord appends a group's record encoded as r to b.
func appendGroupRecord(b, r []byte) []byte {
	b = protowire.AppendTag(b, groupRecordsField, protowire.BytesType)
	return protowire.AppendBytes(b, r)
}

// appendGroupCommitted appends a group's newest commit time to b.
func appendGroupCommitted(b []byte, committedUnixMs int64) []byte {
	b = protowire.AppendTag(b, groupCommittedField, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(committedUnixMs))
}

// storedGroup is a group's stored form, its fields apart.
type storedGroup struct {
	records [][]byte
	// common is the fields its records share, if it has them (a group
	// written before them has not): each record then holds only what it
	// does not share, without its id (expand).
	common    []byte
	hasCommon bool
	committed int64
}

// parseGroup is the group whose stored form is v; ok is false if v is
// not one (it does not walk as protobuf, or a field has a type its
// number does not).
func parseGroup(v []byte) (g storedGroup, ok bool) {
	wellFormed := true
	ok = eachField(v, func(num protowire.Number, typ protowire.Type, value []byte) bool {
		switch {
		case num == groupRecordsField && typ == protowire.BytesType:
			r, _ := protowire.ConsumeBytes(value) // whole: eachField delimited it
			g.records = append(g.records, r)
		case num == groupCommonField && typ == protowire.BytesType:
			g.common, _ = protowire.ConsumeBytes(value)
			g.hasCommon = true
		case num == groupCommittedField && typ == protowire.VarintType:
			c, _ := protowire.ConsumeVarint(value)
			g.committed = int64(c)
		case num == groupRecordsField || num == groupCommonField:
			wellFormed = false
			return false
		}
		return true
	})
	if !ok || !wellFormed {
		return storedGroup{}, false
	}
	return g, true
}

// expand is the i-th record of g, numbered id, encoded whole: its
// group's common fields and commit time, then its own bytes, which name
// whichever of those it does not share, then its id. On the wire the
// later of a field's values is the one decoded.
func (g storedGroup) expand(i int, id string) []byte {
	r := g.records[i]
	if !g.hasCommon {
		return r
	}
	b := make([]byte, 0, len(g.common)+len(r)+len(id)+16)
	b = append(b, g.common...)
	if g.committed != 0 {
		b = protowire.AppendTag(b, committedField, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(g.committed))
	}
	b = append(b, r...)
	b = protowire.AppendTag(b, recordIDField, protowire.BytesType)
	return protowire.AppendString(b, id)
}

// eachField calls fn with each top-level field of the encoded message v,
// in order, its number, type and value (the bytes after its tag, as
// protowire.ConsumeFieldValue delimits them), until fn returns false; ok
// is false if v does not walk as protobuf's wire format that far.
func eachField(v []byte, fn func(num protowire.Number, typ protowire.Type, value []byte) bool) (ok bool) {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return false
		}
		v = v[n:]
		if n = protowire.ConsumeFieldValue(num, typ, v); n < 0 {
			return false
		}
		if !fn(num, typ, v[:n]) {
			return true
		}
		v = v[n:]
	}
	return true
}

// StoredRecord is one record as stored: its suffix (<term>-<n>, also in a
// group) and its encoded adminpb.AuditRecord.
type StoredRecord struct {
	Suffix string
	Value  []byte
}

// StoredRecords are the records stored under suffix with value v, oldest
// first: the one record, or a group's. A group that does not hold as many
// records as its key numbers (which the leader never writes) yields none:
// its records' numbers are unknown, so no reader can place them.
func StoredRecords(suffix string, v []byte) []StoredRecord {
	term, first, last, ok := parseGroupSuffix(suffix)
	if !ok {
		return []StoredRecord{{suffix, v}}
	}
	g, ok := parseGroup(v)
	if !ok || uint64(len(g.records)) != last-first+1 {
		return nil
	}
	out := make([]StoredRecord, len(g.records))
	for i := range g.records {
		n := first + uint64(i)
		out[i] = StoredRecord{AuditSuffix(term, n), g.expand(i, numberedID(term, n))}
	}
	return out
}

// ScanRecords walks the records of space prefix whose suffix is greater
// than after ("": all), oldest first, until fn returns false: first the
// rest of a group that holds after itself (its key sorts before after, or
// is after), then the keys past after.
func ScanRecords(sc PageScanner, prefix, after string, fn func(StoredRecord) bool) {
	more := true
	visit := func(k string, v []byte) bool {
		for _, r := range StoredRecords(strings.TrimPrefix(k, prefix), v) {
			if r.Suffix > after {
				if more = fn(r); !more {
					return false
				}
			}
		}
		return true
	}
	from := ""
	if after != "" {
		from = prefix + after
		// The key at or just before after: "\x00" makes ScanBefore take
		// after's own key too (a group's, which a caller may name).
		sc.ScanBefore(prefix, from+"\x00", func(k string, v []byte) bool {
			visit(k, v)
			return false // ranges do not overlap: one key back at most
		})
		if !more {
			return
		}
	}
	sc.ScanFrom(prefix, from, visit)
}

// ScanRecordsBefore walks the records of space prefix whose suffix is
// less than before ("": all), newest first, until fn returns false: first
// the head of a group whose key sorts after before but that holds records
// below it (a suffix no page of the trail names, but a caller may), then
// the keys from before's own down.
func ScanRecordsBefore(sc PageScanner, prefix, before string, fn func(StoredRecord) bool) {
	more := true
	visit := func(k string, v []byte) bool {
		recs := StoredRecords(strings.TrimPrefix(k, prefix), v)
		for i := len(recs) - 1; i >= 0; i-- {
			if before == "" || recs[i].Suffix < before {
				if more = fn(recs[i]); !more {
					return false
				}
			}
		}
		return true
	}
	from, to := "", ""
	if before != "" {
		from = prefix + before
		sc.ScanFrom(prefix, from, func(k string, v []byte) bool {
			visit(k, v)
			return false
		})
		if !more {
			return
		}
		to = from + "\x00" // before's own key too: a group's may hold records below it
	}
	sc.ScanBefore(prefix, to, visit)
}
