package access

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// sortedKV is a PageScanner over a map, as the FSM's View scans it.
type sortedKV map[string][]byte

func (m sortedKV) keys(prefix string) []string {
	var ks []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (m sortedKV) Scan(prefix string, fn func(string, []byte) bool) { m.ScanFrom(prefix, "", fn) }

func (m sortedKV) ScanFrom(prefix, after string, fn func(string, []byte) bool) {
	for _, k := range m.keys(prefix) {
		if k > after && !fn(k, m[k]) {
			return
		}
	}
}

func (m sortedKV) ScanBefore(prefix, before string, fn func(string, []byte) bool) {
	ks := m.keys(prefix)
	for i := len(ks) - 1; i >= 0; i-- {
		if (before == "" || ks[i] < before) && !fn(ks[i], m[ks[i]]) {
			return
		}
	}
}

func encodedRecord(t *testing.T, term, n uint64, principal string, committed int64) []byte {
	t.Helper()
	b, err := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("%d-%d", term, n), Principal: principal, Method: "SubmitProcedure", Code: "OK", CommittedUnixMs: committed})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putGroup stores records term-first..term-last of principal as one group.
func putGroup(t *testing.T, kv sortedKV, prefix string, term, first, last uint64, principal string) {
	t.Helper()
	var recs [][]byte
	for n := first; n <= last; n++ {
		recs = append(recs, encodedRecord(t, term, n, principal, int64(n)))
	}
	kv[prefix+AuditGroupSuffix(term, first, last)] = MarshalGroup(recs, int64(last))
}

func TestGroupStoredForm(t *testing.T) {
	recs := [][]byte{encodedRecord(t, 3, 7, "alice", 10), encodedRecord(t, 3, 8, "alice", 12)}
	v := MarshalGroup(recs, 12)
	// The stored form is adminpb.AuditRecordGroup's, as its .proto says.
	var g adminpb.AuditRecordGroup
	if err := proto.Unmarshal(v, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.GetRecords()) != 2 || g.GetRecords()[1].GetId() != "3-8" || g.GetCommittedUnixMs() != 12 {
		t.Fatalf("decoded %v", &g)
	}
	if ms, ok := committedUnixMs(v); !ok || ms != 12 {
		t.Fatalf("the retention reads %d %v of a group, want its newest record's 12", ms, ok)
	}
	suffix := AuditGroupSuffix(3, 7, 8)
	got := StoredRecords(suffix, v)
	if len(got) != 2 || got[0].Suffix != AuditSuffix(3, 7) || got[1].Suffix != AuditSuffix(3, 8) || string(got[1].Value) != string(recs[1]) {
		t.Fatalf("StoredRecords = %q", got)
	}
	// A group's key sorts after its first record's suffix and before the
	// next number's.
	if !(AuditSuffix(3, 7) < suffix && suffix < AuditSuffix(3, 8)) {
		t.Fatalf("%q does not sort between its first record and the next", suffix)
	}
	// A group holding other than its key's count is placed nowhere.
	if got := StoredRecords(AuditGroupSuffix(3, 7, 9), v); got != nil {
		t.Fatalf("a short group yields %q", got)
	}
	if got := StoredRecords(suffix, []byte{0xff}); got != nil {
		t.Fatalf("a group that does not walk yields %q", got)
	}
	// A record alone is itself, whatever it holds.
	if got := StoredRecords(AuditSuffix(3, 9), []byte("x")); len(got) != 1 || got[0].Suffix != AuditSuffix(3, 9) {
		t.Fatalf("a record alone yields %q", got)
	}
	for _, bad := range []string{AuditSuffix(3, 7), AuditSuffix(3, 7) + "+", AuditSuffix(3, 7) + "+123", AuditSuffix(3, 8) + "+0000000007", "x+0000000007", strings.Repeat("a", 31) + "+0000000007"} {
		if _, _, _, ok := parseGroupSuffix(bad); ok {
			t.Errorf("parseGroupSuffix(%q) ok", bad)
		}
	}
}

// trailWithGroups is a space of records 1-1..1-20 where 3-6, 7-7 (a group
// of one), 10-15 and 16-18 are groups and the rest records alone.
func trailWithGroups(t *testing.T) (sortedKV, []string) {
	kv := sortedKV{}
	groups := [][2]uint64{{3, 6}, {7, 7}, {10, 15}, {16, 18}}
	var all []string
	for n := uint64(1); n <= 20; n++ {
		all = append(all, AuditSuffix(1, n))
		in := false
		for _, g := range groups {
			in = in || (n >= g[0] && n <= g[1])
		}
		if !in {
			kv[AuditPrefix+AuditSuffix(1, n)] = encodedRecord(t, 1, n, "bob", int64(n))
		}
	}
	for _, g := range groups {
		putGroup(t, kv, AuditPrefix, 1, g[0], g[1], "alice")
	}
	refused, err := proto.Marshal(&adminpb.AuditRecord{Id: "1-99", Principal: "eve", Refused: true})
	if err != nil {
		t.Fatal(err)
	}
	kv[RefusedPrefix+AuditSuffix(1, 99)] = refused // another space
	return kv, all
}

func TestScanRecordsFromEveryPlace(t *testing.T) {
	kv, all := trailWithGroups(t)
	// From every record, every group key and between them, forwards and
	// backwards: exactly the records past the place, in order.
	places := []string{""}
	for _, k := range kv.keys(AuditPrefix) {
		places = append(places, strings.TrimPrefix(k, AuditPrefix))
	}
	places = append(places, all...)
	places = append(places, AuditSuffix(1, 12)+"+", AuditSuffix(1, 21), AuditSuffix(0, 5), AuditSuffix(1, 3)+"+9")
	for _, at := range places {
		var want, wantDesc []string
		for _, s := range all {
			if s > at {
				want = append(want, s)
			}
			if at == "" || s < at {
				wantDesc = append([]string{s}, wantDesc...)
			}
		}
		var got, gotDesc []string
		ScanRecords(kv, AuditPrefix, at, func(r StoredRecord) bool {
			got = append(got, r.Suffix)
			var rec adminpb.AuditRecord
			if err := proto.Unmarshal(r.Value, &rec); err != nil || AuditSuffixOfID(t, rec.GetId()) != r.Suffix {
				t.Fatalf("record %s holds %v (%v)", r.Suffix, &rec, err)
			}
			return true
		})
		ScanRecordsBefore(kv, AuditPrefix, at, func(r StoredRecord) bool {
			gotDesc = append(gotDesc, r.Suffix)
			return true
		})
		if !slices.Equal(got, want) {
			t.Errorf("after %q: %q, want %q", at, got, want)
		}
		if !slices.Equal(gotDesc, wantDesc) {
			t.Errorf("before %q: %q, want %q", at, gotDesc, wantDesc)
		}
		// Stopping anywhere, also inside a group, stops there.
		for stop := 1; stop <= len(want); stop++ {
			n := 0
			ScanRecords(kv, AuditPrefix, at, func(StoredRecord) bool { n++; return n < stop })
			if n != stop {
				t.Fatalf("after %q, stopped at %d: %d records visited", at, stop, n)
			}
		}
		for stop := 1; stop <= len(wantDesc); stop++ {
			n := 0
			ScanRecordsBefore(kv, AuditPrefix, at, func(StoredRecord) bool { n++; return n < stop })
			if n != stop {
				t.Fatalf("before %q, stopped at %d: %d records visited", at, stop, n)
			}
		}
	}
}

// pageThrough lists req from sc a page of limit at a time, each page's
// token passed to the next, to the end: every page at most limit long,
// every token moving on.
func pageThrough(t *testing.T, sc PageScanner, req *adminpb.ListAuditRequest, limit int) []*adminpb.AuditRecord {
	t.Helper()
	kind := PageToken
	if req.GetNewestFirst() {
		kind = DescPageToken
	}
	var out []*adminpb.AuditRecord
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("limit %d: no end after %d pages", limit, pages)
		}
		resp := ListPage(sc, req, after, limit)
		if len(resp.GetRecords()) > limit {
			t.Fatalf("a page of %d records at limit %d", len(resp.GetRecords()), limit)
		}
		out = append(out, resp.GetRecords()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		s, ok := adminpb.DecodePageToken(kind, resp.GetNextPageToken())
		if !ok {
			t.Fatalf("token %q", resp.GetNextPageToken())
		}
		if s == after {
			t.Fatalf("limit %d: the token did not move from %q", limit, s)
		}
		after = s
	}
}

// AuditSuffixOfID is the suffix of record id.
func AuditSuffixOfID(t *testing.T, id string) string {
	t.Helper()
	k, ok := AuditKeyOf(id)
	if !ok {
		t.Fatalf("id %q", id)
	}
	return strings.TrimPrefix(k, AuditPrefix)
}

func TestListPageThroughGroups(t *testing.T) {
	kv, all := trailWithGroups(t)
	for _, desc := range []bool{false, true} {
		want := slices.Clone(all)
		if desc {
			slices.Reverse(want)
		}
		for limit := 1; limit <= 22; limit++ {
			var got []string
			for _, r := range pageThrough(t, kv, &adminpb.ListAuditRequest{NewestFirst: desc}, limit) {
				if !r.GetRefused() {
					got = append(got, AuditSuffixOfID(t, r.GetId()))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("desc %v limit %d: %q, want %q", desc, limit, got, want)
			}
		}
		// A filter reads inside groups too.
		resp := ListPage(kv, &adminpb.ListAuditRequest{NewestFirst: desc, Principal: "alice"}, "", 100)
		if len(resp.GetRecords()) != 14 {
			t.Fatalf("desc %v: alice has %d records, want 14", desc, len(resp.GetRecords()))
		}
	}
}

func TestIndexCountsGroupsRecords(t *testing.T) {
	kv, _ := trailWithGroups(t)
	sp := &Space{Prefix: AuditPrefix, Max: 100, PerHolder: 10}
	x := sp.BuildIndex(kv.Scan, func(string) bool { return false })
	if x.records != 20 || x.groups[holderGroup+"alice"].live != 14 || x.groups[holderGroup+"bob"].live != 6 {
		t.Fatalf("records %d, alice %d, bob %d", x.records, x.groups[holderGroup+"alice"].live, x.groups[holderGroup+"bob"].live)
	}
	// alice is 4 past her quota of 10: her oldest group (4 records) goes
	// whole, and nothing of bob's.
	got := x.QuotaPrunes(sp, 100, func(string) bool { return false })
	if want := []string{AuditPrefix + AuditGroupSuffix(1, 3, 6)}; !slices.Equal(got, want) {
		t.Fatalf("prunes %q, want %q", got, want)
	}
	// Past the ceiling, the biggest holder's oldest key goes, counted by
	// its records: alice's 10 against bob's 6.
	sp.Max = 15
	got = x.QuotaPrunes(sp, 100, func(string) bool { return false })
	if want := []string{AuditPrefix + AuditGroupSuffix(1, 7, 7)}; !slices.Equal(got, want) {
		t.Fatalf("prunes past the ceiling %q, want %q", got, want)
	}
	if x.records != 15 {
		t.Fatalf("records %d after the prunes", x.records)
	}
}
