package access

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestGroupKeepsWhatARecordDoesNotShare: a group's records are read back
// whole, each with its own shared fields where they are not its group's
// first record's (an empty one after a full one too), its own commit
// time where it is not the group's, and its id from the key; and a
// group of one caller's submissions keeps each in well under half the
// bytes its record takes whole.
func TestGroupKeepsWhatARecordDoesNotShare(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	at := time.Unix(1_000_000, 0)
	p := Principal{Kind: KindClient, ID: "alice"}
	var recs []*adminpb.AuditRecord
	for i := range 64 {
		r := NewRequestRecord(at.Add(time.Duration(i)*time.Millisecond), "m1", p, "SubmitProcedure",
			&adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}, &adminpb.SubmitProcedureResponse{Id: uint64(1000 + i)}, nil)
		r.Peer = "10.0.0.1:50000"
		switch i {
		case 10:
			r.Via, r.Peer = "m2", "" // forwarded: a via, no peer
		case 11:
			r.Code, r.Message = "INTERNAL", "boom"
		case 12:
			r.CommittedUnixMs = 999 // given before its fold
		case 13:
			r.Name = "ci-token"
		}
		recs = append(recs, r)
	}
	want := make([]*adminpb.AuditRecord, len(recs))
	muts := foldRecords(t, l, st, recs...)
	for i, r := range recs {
		want[i] = proto.Clone(r).(*adminpb.AuditRecord)
		RenderArgs(want[i])
	}
	if len(muts) != 1 {
		t.Fatalf("one caller's records went into %d keys", len(muts))
	}
	stored := StoredRecords(strings.TrimPrefix(muts[0].Key, AuditPrefix), muts[0].Value)
	if len(stored) != len(recs) {
		t.Fatalf("read %d records of %d", len(stored), len(recs))
	}
	whole := 0
	for i, sr := range stored {
		var got adminpb.AuditRecord
		if err := UnmarshalRecord(sr.Value, &got); err != nil {
			t.Fatal(err)
		}
		if u := got.ProtoReflect().GetUnknown(); len(u) != 0 {
			t.Fatalf("record %d has unknown bytes %x", i, u)
		}
		if !proto.Equal(&got, want[i]) {
			t.Fatalf("record %d read\n%v\nwant\n%v", i, &got, want[i])
		}
		if got.GetArgs() == "" || got.GetArgsDigest() == "" || got.GetRequest() != nil {
			t.Fatalf("record %d: args %q, digest %q, request %x", i, got.GetArgs(), got.GetArgsDigest(), got.GetRequest())
		}
		b, err := proto.Marshal(want[i])
		if err != nil {
			t.Fatal(err)
		}
		whole += len(b)
	}
	if kept := len(muts[0].Value); kept*2 > whole {
		t.Fatalf("the group keeps %d bytes for %d records, whole they are %d", kept, len(recs), whole)
	} else {
		t.Logf("%d records: %d bytes in the group, %d whole (%.0f and %.0f a record)", len(recs), kept, whole, float64(kept)/float64(len(recs)), float64(whole)/float64(len(recs)))
	}
	// The stored form is AuditRecordGroup's, nothing unknown in it.
	var g adminpb.AuditRecordGroup
	if err := proto.Unmarshal(muts[0].Value, &g); err != nil || len(g.ProtoReflect().GetUnknown()) != 0 || len(g.GetCommon()) == 0 {
		t.Fatalf("the group decodes as %v (%v)", &g, err)
	}
}

// TestDamagedGroupsReadSafely: a group with its common fields, cut or with
// bytes changed anywhere, yields no records or records that decode or do
// not, never a panic; and one whose common field is not bytes yields none.
func TestDamagedGroupsReadSafely(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	var recs []*adminpb.AuditRecord
	for i := range 5 {
		r := NewRequestRecord(time.Unix(1_000_000, 0), "m1", Principal{Kind: KindClient, ID: "bob"}, "CreateTable", &adminpb.CreateTableRequest{Name: "t", Regions: 3}, nil, nil)
		if i == 2 {
			r.Node = "m2"
		}
		recs = append(recs, r)
	}
	muts := foldRecords(t, l, st, recs...)
	suffix, v := strings.TrimPrefix(muts[0].Key, AuditPrefix), muts[0].Value
	if got := StoredRecords(suffix, v); len(got) != 5 {
		t.Fatalf("read %d records", len(got))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		bad := append([]byte(nil), v...)
		switch rng.IntN(3) {
		case 0:
			bad = bad[:rng.IntN(len(bad))]
		case 1:
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		default:
			for range 1 + rng.IntN(4) {
				bad[rng.IntN(len(bad))] = byte(rng.IntN(256))
			}
		}
		for _, sr := range StoredRecords(suffix, bad) {
			var r adminpb.AuditRecord
			_ = UnmarshalRecord(sr.Value, &r)
			clone := proto.Clone(&r).(*adminpb.AuditRecord)
			SanitizeRecord(clone)
		}
	}
	// common as a varint: not a group this tree writes.
	odd := append([]byte{byte(groupCommonField<<3 | 0), 1}, v...)
	if got := StoredRecords(suffix, odd); got != nil {
		t.Fatalf("a group whose common is a varint yields %d records", len(got))
	}
}

// TestGroupSizeIsWhatIsAppended: the fold sizes a group's buffer
// exactly, whether records share the common fields or not, keep their
// own commit time or not, and were encoded as prepared or whole.
func TestGroupSizeIsWhatIsAppended(t *testing.T) {
	f := version.Format2
	l, _ := groupingTrail(t, &f)
	var run []*Prepared
	for i := range 6 {
		r := NewRequestRecord(time.Unix(1_000_000, 0), "m1", Principal{Kind: KindClient, ID: "bob"}, "AbortProcedure", &adminpb.ProcedureRef{Id: uint64(i)}, nil, nil)
		if i%2 == 1 {
			r.Peer = "10.0.0.2:1"
		}
		p := l.Prepare(r)
		r.CommittedUnixMs, r.Id = int64(100+i%3), numberedID(1, uint64(i+1))
		if i > 2 {
			r.ProcIds = []uint64{uint64(i), 1 << 50}
		}
		if i == 4 {
			p.wire = nil
		}
		run = append(run, p)
	}
	b, err := appendGroup(nil, run, 102)
	if err != nil {
		t.Fatal(err)
	}
	if n := groupSize(run, 102); n != len(b) {
		t.Fatalf("sized %d, appended %d", n, len(b))
	}
	for i, sr := range StoredRecords(AuditGroupSuffix(1, 1, 6), b) {
		var got adminpb.AuditRecord
		if err := UnmarshalRecord(sr.Value, &got); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(run[i].rec).(*adminpb.AuditRecord)
		RenderArgs(want)
		if !proto.Equal(&got, want) {
			t.Fatalf("record %d read\n%v\nwant\n%v", i, &got, want)
		}
	}
}
