package admin

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// A page of repair records ends at its byte budget as well as at its
// count, so that 'cluster repairs' fits in a gRPC message whatever the
// records hold; the next page starts after the last record sent.
func TestRepairPageBoundedByBytes(t *testing.T) {
	var recs []catalog.Repair
	for i := uint64(1); i <= 10; i++ {
		recs = append(recs, catalog.Repair{Seq: i, Action: "region assign", Result: strings.Repeat("r", 1000)})
	}
	one := proto.Size(&adminpb.RepairRecord{Seq: 1, Action: "region assign", Result: strings.Repeat("r", 1000)})
	for _, tc := range []struct {
		name      string
		limit     int
		maxBytes  int
		wantCount int
		wantNext  string
	}{
		{"all fit, fewer than the limit", 100, 1 << 20, 10, ""},
		{"all fit, as many as the limit", 10, 1 << 20, 10, "10"},
		{"the bytes end the page", 100, 3*one + one/2, 3, "3"},
		{"one record larger than the budget still goes", 100, one / 2, 1, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := repairPage(recs[:min(len(recs), tc.limit)], tc.limit, tc.maxBytes)
			if len(got) != tc.wantCount || next != tc.wantNext {
				t.Fatalf("page of %d records, next %q; want %d, %q", len(got), next, tc.wantCount, tc.wantNext)
			}
		})
	}
	if got, next := repairPage(nil, 100, 1<<20); len(got) != 0 || next != "" {
		t.Fatalf("empty: %v, %q", got, next)
	}
}
