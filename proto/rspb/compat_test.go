package rspb

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// encode010Register is a RegisterServerRequest as 0.1.0 sends it: fields
// 1, 2, 3 and 4 only, by hand, so that no change to the current schema
// changes what the test decodes.
func encode010Register() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "rs1")
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "10.0.0.5:16020")
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, "ns:t,,1")
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	return b
}

// TestRegisterServerRequestFrom010: a 0.1.0 region server's registration
// decodes with the version fields absent (the master shows it as not
// reported), and the current encoding adds only fields 101 and 102, which
// a 0.1.0 master, whose schema ends at 4, keeps as unknown fields.
func TestRegisterServerRequestFrom010(t *testing.T) {
	old := encode010Register()
	var got RegisterServerRequest
	if err := proto.Unmarshal(old, &got); err != nil {
		t.Fatalf("0.1.0's encoding does not decode: %v", err)
	}
	want := &RegisterServerRequest{ServerId: "rs1", Address: "10.0.0.5:16020", Regions: []string{"ns:t,,1"}, DroppedStartCode: 7}
	if !proto.Equal(&got, want) || got.GetVersion() != "" || got.GetMaxFormat() != 0 || len(got.ProtoReflect().GetUnknown()) != 0 {
		t.Errorf("decoded %v, want %v without a version", &got, want)
	}

	cur := proto.Clone(want).(*RegisterServerRequest)
	cur.Version, cur.MaxFormat = "0.2.0", 2
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(cur)
	if err != nil {
		t.Fatal(err)
	}
	var known []byte // the fields 0.1.0's schema has, as they are encoded
	extra := map[protowire.Number]bool{}
	for b := enc; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag in %x", enc)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatalf("bad field %d in %x", num, enc)
		}
		if num <= 4 {
			known = append(known, b[:n+m]...)
		} else {
			extra[num] = true
		}
		b = b[n+m:]
	}
	if string(known) != string(old) || len(extra) != 2 || !extra[101] || !extra[102] {
		t.Errorf("the current encoding %x: 0.1.0's fields %x (want %x), others %v (want 101, 102)", enc, known, old, extra)
	}
}
