package domain

import (
	"fmt"
	"math"
	"testing"
)

// TestRegionNameAndServerRef checks the names built by hand against the
// fmt formats they replaced: a region's name is its key, and 0.1.0
// masters name the same regions.
func TestRegionNameAndServerRef(t *testing.T) {
	for _, i := range []int{0, 7, 42, 9999, 10000, 99999, 100000, 1234567, -1, -12345} {
		for _, id := range []uint64{0, 1, 123456789, math.MaxUint64} {
			for _, table := range []string{"", "default:t1", "ns.x-y:tbl_2"} {
				if got, want := RegionName(table, i, id), fmt.Sprintf("%s,%05d,%d", table, i, id); got != want {
					t.Errorf("RegionName(%q, %d, %d) = %q, want %q", table, i, id, got, want)
				}
			}
		}
	}
	for _, r := range []ServerRef{{}, {ID: "rs-1", StartCode: 1732500000123}, {ID: "a", StartCode: math.MaxUint64}} {
		if got, want := r.String(), fmt.Sprintf("%s/%d", r.ID, r.StartCode); got != want {
			t.Errorf("%#v.String() = %q, want %q", r, got, want)
		}
	}
}
