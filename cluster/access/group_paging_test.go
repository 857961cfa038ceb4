package access

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// layoutRecord is a record of randomLayout's, as a listing should give it.
type layoutRecord struct {
	suffix, principal, method string
	refused                   bool
}

// randomLayout is a random trail: audit/ with singles and groups over 2
// terms, audit-refused/ with singles, interleaved numbers.
func randomLayout(t *testing.T, rng *rand.Rand) (sortedKV, []layoutRecord) {
	kv := sortedKV{}
	var all []layoutRecord
	principals := []string{"alice", "bob", "carol"}
	methods := []string{"SubmitProcedure", "AclGrant"}
	for term := uint64(1); term <= 2; term++ {
		n := uint64(1)
		for n < 40 {
			p := principals[rng.Intn(len(principals))]
			m := methods[rng.Intn(len(methods))]
			switch rng.Intn(4) {
			case 0: // refusal
				b, _ := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("%d-%d", term, n), Principal: p, Method: m, Refused: true})
				kv[RefusedPrefix+AuditSuffix(term, n)] = b
				all = append(all, layoutRecord{AuditSuffix(term, n), p, m, true})
				n++
			case 1: // single
				b, _ := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("%d-%d", term, n), Principal: p, Method: m})
				kv[AuditPrefix+AuditSuffix(term, n)] = b
				all = append(all, layoutRecord{AuditSuffix(term, n), p, m, false})
				n++
			case 2: // a gap (a failed write)
				n++
			default: // group
				size := uint64(1 + rng.Intn(6))
				var recs [][]byte
				for i := uint64(0); i < size; i++ {
					mm := methods[rng.Intn(len(methods))]
					b, _ := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("%d-%d", term, n+i), Principal: p, Method: mm})
					recs = append(recs, b)
					all = append(all, layoutRecord{AuditSuffix(term, n+i), p, mm, false})
				}
				kv[AuditPrefix+AuditGroupSuffix(term, n, n+size-1)] = MarshalGroup(recs, 1)
				n += size
			}
		}
	}
	slices.SortFunc(all, func(a, b layoutRecord) int { return strings.Compare(a.suffix, b.suffix) })
	return kv, all
}

// TestListPageRandomLayouts pages random mixes of groups, singles
// and refusals, with every filter and page size, both ways.
func TestListPageRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for iter := 0; iter < 30; iter++ {
		kv, all := randomLayout(t, rng)
		for _, desc := range []bool{false, true} {
			for _, f := range []struct{ p, m string }{{"", ""}, {"alice", ""}, {"", "AclGrant"}, {"bob", "SubmitProcedure"}, {"nobody", ""}} {
				var want []string
				for _, r := range all {
					if (f.p == "" || r.principal == f.p) && (f.m == "" || r.method == f.m) {
						want = append(want, r.suffix)
					}
				}
				if desc {
					slices.Reverse(want)
				}
				for limit := 1; limit <= 12; limit++ {
					var got []string
					for _, r := range pageThrough(t, kv, &adminpb.ListAuditRequest{NewestFirst: desc, Principal: f.p, Method: f.m}, limit) {
						got = append(got, AuditSuffixOfID(t, r.GetId()))
					}
					if !slices.Equal(got, want) {
						t.Fatalf("iter %d desc %v filter %v limit %d:\n got %q\nwant %q", iter, desc, f, limit, got, want)
					}
				}
			}
		}
	}
}

// TestScanRecordsCraftedPlaces: from any string, the records past
// it (before it) exactly once, in order; no panic.
func TestScanRecordsCraftedPlaces(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for iter := 0; iter < 20; iter++ {
		kv, all := randomLayout(t, rng)
		var places []string
		for k := range kv {
			s := suffixOf(k)
			places = append(places, s, s+"\x00", s+"+", s[:len(s)-1], s+"0", s+"+9999999999", s[:21])
		}
		places = append(places, "", "+", "\xff", "0", "-", "00000000000000000001-", "00000000000000000001-0000000003+")
		for i := 0; i < 50; i++ {
			b := make([]byte, rng.Intn(40))
			for j := range b {
				b[j] = "0123456789-+\x00\xff"[rng.Intn(14)]
			}
			places = append(places, string(b))
		}
		for _, at := range places {
			var want, wantDesc []string
			for _, r := range all {
				if r.refused {
					continue
				}
				if r.suffix > at {
					want = append(want, r.suffix)
				}
				if at == "" || r.suffix < at {
					wantDesc = append([]string{r.suffix}, wantDesc...)
				}
			}
			var got, gotDesc []string
			ScanRecords(kv, AuditPrefix, at, func(r StoredRecord) bool { got = append(got, r.Suffix); return true })
			ScanRecordsBefore(kv, AuditPrefix, at, func(r StoredRecord) bool { gotDesc = append(gotDesc, r.Suffix); return true })
			if !slices.Equal(got, want) {
				t.Fatalf("after %q:\n got %q\nwant %q", at, got, want)
			}
			if !slices.Equal(gotDesc, wantDesc) {
				t.Fatalf("before %q:\n got %q\nwant %q", at, gotDesc, wantDesc)
			}
			for _, desc := range []bool{false, true} {
				_ = ListPage(kv, &adminpb.ListAuditRequest{NewestFirst: desc}, at, 3)
			}
		}
	}
}

// TestCorruptGroups: corrupt stored groups neither panic a reader
// nor hide their neighbours.
func TestCorruptGroups(t *testing.T) {
	kv := sortedKV{}
	kv[AuditPrefix+AuditSuffix(1, 1)] = encodedRecord(t, 1, 1, "a", 1)
	kv[AuditPrefix+AuditGroupSuffix(1, 2, 4)] = []byte{0x82, 0x01, 0xff} // truncated field 16
	kv[AuditPrefix+AuditGroupSuffix(1, 5, 9999999999)] = MarshalGroup([][]byte{encodedRecord(t, 1, 5, "a", 1)}, 1)
	kv[AuditPrefix+AuditGroupSuffix(1, 10000000000-1, 10000000000-1)] = MarshalGroup([][]byte{[]byte("\xff\xff")}, 1)
	kv[AuditPrefix+"00000000000000000002-0000000001"] = encodedRecord(t, 2, 1, "a", 1)
	for _, desc := range []bool{false, true} {
		resp := ListPage(kv, &adminpb.ListAuditRequest{NewestFirst: desc}, "", 10)
		if len(resp.GetRecords()) != 2 {
			t.Errorf("desc %v: %d records", desc, len(resp.GetRecords()))
		}
	}
	sp := &Space{Prefix: AuditPrefix, Max: 100, PerHolder: 10}
	x := sp.BuildIndex(kv.Scan, func(string) bool { return false })
	if x.records != 2 {
		t.Errorf("index counts %d", x.records)
	}
}
