package access

import (
	"math/rand/v2"
	"strings"
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

// TestCommittedUnixMsOnCorruptRecords (written by a reviewer of the
// change; it held): random corruptions of a
// record as the trail writes it; every disagreement with proto.Unmarshal
// about whether a record is kept is reported by kind.
func TestCommittedUnixMsOnCorruptRecords(t *testing.T) {
	base, err := proto.Marshal(&adminpb.AuditRecord{Id: "3-9", AtUnixMs: 5, Principal: "p", Method: "SubmitProcedure", Args: `{"a":1}`, Code: "OK", ProcIds: []uint64{1, 300}, Node: "m1", Peer: "1.2.3.4:5", CommittedUnixMs: 1_700_000_000_123, Refused: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	disagree := 0
	kinds := map[bool]int{}
	defer func() {
		t.Logf("kept though undecodable: %d for invalid UTF-8, %d otherwise", kinds[true], kinds[false])
	}()
	for range 100_000 {
		v := append([]byte(nil), base...)
		for range 1 + rng.IntN(3) {
			switch rng.IntN(3) {
			case 0:
				v[rng.IntN(len(v))] = byte(rng.IntN(256))
			case 1:
				i := rng.IntN(len(v))
				v = v[:i+copy(v[i:], v[i+1:])]
			case 2:
				v = v[:rng.IntN(len(v)+1)]
			}
			if len(v) == 0 {
				break
			}
		}
		var r adminpb.AuditRecord
		uerr := proto.Unmarshal(v, &r)
		ms, ok := committedUnixMs(v)
		if uerr == nil && (!ok || ms != r.GetCommittedUnixMs()) {
			t.Errorf("decodes (ms %d) but committedUnixMs = %d, %v: %x", r.GetCommittedUnixMs(), ms, ok, v)
		}
		if uerr != nil && ok {
			kinds[strings.Contains(uerr.Error(), "UTF-8")]++
		}
		if (uerr == nil) != ok || (ok && ms != r.GetCommittedUnixMs()) {
			disagree++
			if disagree <= 2 {
				t.Logf("disagreement on %x: Unmarshal err=%v ms=%d; committedUnixMs=%d,%v", v, uerr, r.GetCommittedUnixMs(), ms, ok)
			}
		}
	}
	if disagree > 0 {
		t.Logf("%d of 100000 corruptions judged otherwise than proto.Unmarshal did (a corrupt record kept until its time instead of pruned)", disagree)
	}
}
