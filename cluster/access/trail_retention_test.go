package access

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// TestCommittedUnixMsReadsWhatUnmarshalReads: the retention scan's read
// of one field agrees with decoding the whole record, and calls a record
// it cannot walk malformed, as the decode failed on it.
func TestCommittedUnixMsReadsWhatUnmarshalReads(t *testing.T) {
	full, err := proto.Marshal(&adminpb.AuditRecord{Id: "3-9", Principal: "p", Method: "M", Args: `{"a":1}`, ProcIds: []uint64{1, 2}, CommittedUnixMs: 1_700_000_000_123, AtUnixMs: 5})
	if err != nil {
		t.Fatal(err)
	}
	zero, _ := proto.Marshal(&adminpb.AuditRecord{Id: "3-9"})
	// A field repeated on the wire: the last one counts.
	twice := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), full...), committedField, protowire.VarintType), 42)
	// An unknown field after it.
	unknown := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), full...), 999, protowire.BytesType), []byte("x"))
	for name, v := range map[string][]byte{"full": full, "zero": zero, "empty": nil, "twice": twice, "unknown": unknown} {
		var r adminpb.AuditRecord
		if err := proto.Unmarshal(v, &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ms, ok := committedUnixMs(v); !ok || ms != r.GetCommittedUnixMs() {
			t.Errorf("%s: committedUnixMs = %d, %v; Unmarshal reads %d", name, ms, ok, r.GetCommittedUnixMs())
		}
	}
	for name, v := range map[string][]byte{"cut": full[:len(full)-3], "bad tag": {0xff}, "cut varint": protowire.AppendTag(nil, committedField, protowire.VarintType)} {
		if _, ok := committedUnixMs(v); ok {
			t.Errorf("%s: read as well-formed", name)
		}
		if proto.Unmarshal(v, new(adminpb.AuditRecord)) == nil {
			t.Errorf("%s: Unmarshal takes it: the case tests nothing", name)
		}
	}
}
