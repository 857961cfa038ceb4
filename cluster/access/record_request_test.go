package access

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// requestCases are requests of several methods, with what the JSON of
// each must escape or cut; kept says a record keeps the request.
func requestCases() []struct {
	method string
	req    proto.Message
	kept   bool
} {
	return []struct {
		method string
		req    proto.Message
		kept   bool
	}{
		{"SubmitProcedure", &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0", "b": "x\x01y", "a": "é"}}, true},
		{"SubmitProcedure", &adminpb.SubmitProcedureRequest{Type: strings.Repeat("t", 900)}, true},   // JSON cut, request kept
		{"SubmitProcedure", &adminpb.SubmitProcedureRequest{Type: strings.Repeat("t", 2000)}, false}, // too big to keep
		{"AbortProcedure", &adminpb.ProcedureRef{Id: 1 << 60}, true},
		{"CreateTable", &adminpb.CreateTableRequest{Name: "t1", Regions: 40}, true},
		{"AbortProcedure", &adminpb.CreateTableRequest{Name: "not the method's request"}, false},
		{"NoSuchMethod", &adminpb.ProcedureRef{Id: 3}, false},
		{"AbortProcedure", &adminpb.ProcedureRef{}, false}, // no bytes: no request on the wire
		{"SubmitProcedure", &adminpb.SubmitProcedureRequest{}, false},
	}
}

// TestRequestRecordReadsAsNewRecordWrites: a record that keeps its
// request is read (stored alone, or in a group, or sent by a standby)
// with the args and digest a record made at the call holds, and without
// the request; one whose request is too big, of a method this binary
// does not know, or not the method's own, is made with its args.
func TestRequestRecordReadsAsNewRecordWrites(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	p := Principal{Kind: KindClient, ID: "alice"}
	for i, c := range requestCases() {
		err := status.Error(codes.OK, "")
		if i%2 == 1 {
			err = errors.New("boom")
		}
		want := NewRecord(at, "m1", p, c.method, c.req, nil, err)
		SanitizeRecord(want)
		got := NewRequestRecord(at, "m1", p, c.method, c.req, nil, err)
		kept := len(got.GetRequest()) > 0
		if kept != c.kept {
			t.Fatalf("%s %T (%d bytes): request kept %v, want %v", c.method, c.req, proto.Size(c.req), kept, c.kept)
		}
		if kept && (got.GetArgs() != "" || got.GetArgsDigest() != "") {
			t.Fatalf("%s: a record keeping its request also holds args %q %q", c.method, got.GetArgs(), got.GetArgsDigest())
		}
		SanitizeRecord(got)
		b, merr := proto.Marshal(got)
		if merr != nil {
			t.Fatal(merr)
		}
		var read adminpb.AuditRecord
		if err := UnmarshalRecord(b, &read); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&read, want) {
			t.Fatalf("%s: read\n%v\nwant what NewRecord makes\n%v", c.method, &read, want)
		}
		if len(read.GetArgs()) > FieldMax || read.GetArgsDigest() == "" {
			t.Fatalf("%s: args of %d bytes, digest %q", c.method, len(read.GetArgs()), read.GetArgsDigest())
		}
	}
}

// TestRenderArgsOfWhatCannotBeRead: a request of a method this binary
// does not know, or that does not decode, keeps its digest, and its args
// say why there are none; a standby's record whose request is bigger than
// any a master keeps is rendered as it is sanitized, and so is one that
// holds both forms.
func TestRenderArgsOfWhatCannotBeRead(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  *adminpb.AuditRecord
		args string
	}{
		{"unknown method", &adminpb.AuditRecord{Method: "FromTheFuture", Request: []byte{0x08, 0x01}}, "(a request of a method this binary does not know)"},
		{"does not decode", &adminpb.AuditRecord{Method: "AbortProcedure", Request: []byte{0x0a, 0x7f}}, "(a request that does not decode)"},
	} {
		wire := c.rec.Request
		RenderArgs(c.rec)
		if c.rec.GetArgs() != c.args || c.rec.GetArgsDigest() != argsDigest(wire) || c.rec.GetRequest() != nil {
			t.Fatalf("%s: rendered %v", c.name, c.rec)
		}
	}
	big, err := proto.Marshal(&adminpb.SubmitProcedureRequest{Type: strings.Repeat("x", 3000)})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*adminpb.AuditRecord{
		{Method: "SubmitProcedure", Request: big},
		{Method: "SubmitProcedure", Request: big[:20:20], Args: "forged"},
	} {
		wire := rec.Request
		SanitizeRecord(rec)
		if rec.GetRequest() != nil || rec.GetArgsDigest() != argsDigest(wire) || rec.GetArgs() == "" || rec.GetArgs() == "forged" || len(rec.GetArgs()) > FieldMax {
			t.Fatalf("sanitized %d bytes of request into %q (%d bytes of args), digest %q", len(wire), rec.GetRequest(), len(rec.GetArgs()), rec.GetArgsDigest())
		}
	}
}

// TestArgsAreCompactJSON: a record's args are the same bytes whichever
// binary renders them: protojson's output, which adds a space here and
// there as a build's hash says, compacted.
func TestArgsAreCompactJSON(t *testing.T) {
	req := &adminpb.SubmitProcedureRequest{Type: "sleep", Owner: "o", Nonce: "n", Arguments: map[string]string{"a": "1", "b": "x y", "c": "{\"k\": 1}"}}
	got := argsJSON(req)
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(got)); err != nil || compact.String() != got {
		t.Fatalf("args %q are not compact JSON (%v)", got, err)
	}
	var back adminpb.SubmitProcedureRequest
	if err := protojson.Unmarshal([]byte(got), &back); err != nil || !proto.Equal(&back, req) {
		t.Fatalf("args %q read back as %v (%v)", got, &back, err)
	}
}

// TestTrailBelowFormat2StoresNoRequest: below cluster version 2 a record
// that keeps its request (a standby's, made as the version rose, or
// forged) is written with its args, whichever way it reaches the trail.
func TestTrailBelowFormat2StoresNoRequest(t *testing.T) {
	for _, f := range []version.Format{version.Format1, version.Format2} {
		l, _ := groupingTrail(t, &f)
		mk := func() *adminpb.AuditRecord {
			return NewRequestRecord(time.Unix(1_000_000, 0), "m1", Principal{Kind: KindClient, ID: "c"}, "AbortProcedure", &adminpb.ProcedureRef{Id: 9}, nil, nil)
		}
		prepared := l.Prepare(mk()).Record()
		updated := mk()
		l.Update(updated)
		for name, r := range map[string]*adminpb.AuditRecord{"carried": prepared, "written": updated} {
			if kept := len(r.GetRequest()) > 0; kept != (f == version.Format2) || (!kept && (r.GetArgs() == "" || r.GetArgsDigest() == "")) {
				t.Fatalf("at %v a record %s holds request %x, args %q, digest %q", f, name, r.GetRequest(), r.GetArgs(), r.GetArgsDigest())
			}
		}
	}
}

// TestGroupValueMisreadAsARecordIsEmpty: a group's value read as a
// record alone (under a key no group has) is an empty record, as before
// groups had common fields: no field of a group is a record's.
func TestGroupValueMisreadAsARecordIsEmpty(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	recs := []*adminpb.AuditRecord{
		NewRequestRecord(time.Unix(1_000_000, 0), "m1", Principal{Kind: KindClient, ID: "c"}, "AbortProcedure", &adminpb.ProcedureRef{Id: 9}, nil, nil),
		NewRequestRecord(time.Unix(1_000_000, 0), "m1", Principal{Kind: KindClient, ID: "c"}, "AbortProcedure", &adminpb.ProcedureRef{Id: 10}, nil, nil),
	}
	muts := foldRecords(t, l, st, recs...)
	var r adminpb.AuditRecord
	if err := UnmarshalRecord(muts[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	r.ProtoReflect().SetUnknown(nil)
	if !proto.Equal(&r, &adminpb.AuditRecord{CommittedUnixMs: r.GetCommittedUnixMs()}) {
		t.Fatalf("a group read as a record: %v", &r)
	}
}
