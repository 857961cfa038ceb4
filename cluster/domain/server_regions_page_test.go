package domain

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestServerRegionsPage: pages of both lists end at the same name, so
// that each page compares like with like, and paging through covers
// every name once, whether the region server pages (more) or, older than
// paging, answers everything at once.
func TestServerRegionsPage(t *testing.T) {
	names := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("r%05d", i))
		}
		return out
	}
	for _, tc := range []struct {
		what             string
		assigned, hosted []string
		pagingServer     bool
		size             int
	}{
		{"equal lists", names(0, 25), names(0, 25), true, 10},
		{"hosted ahead", names(10, 25), names(0, 30), true, 7},
		{"assigned ahead", names(0, 40), names(5, 12), true, 10},
		{"old region server", names(0, 25), names(3, 28), false, 10},
		{"none hosted", names(0, 5), nil, true, 10},
	} {
		var gotA, gotH []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatalf("%s: no end", tc.what)
			}
			a := tc.assigned[sortedAfter(tc.assigned, after):]
			h := tc.hosted[sortedAfter(tc.hosted, after):]
			more := false
			if tc.pagingServer && len(h) > tc.size {
				h, more = h[:tc.size], true
			}
			pa, ph, next := serverRegionsPage(a, h, more, tc.size)
			if len(pa) > tc.size || len(ph) > tc.size {
				t.Errorf("%s: a page of %d assigned, %d hosted", tc.what, len(pa), len(ph))
			}
			if next != "" && ((len(pa) > 0 && pa[len(pa)-1] > next) || (len(ph) > 0 && ph[len(ph)-1] > next)) {
				t.Errorf("%s: a page past its next %q", tc.what, next)
			}
			gotA, gotH = append(gotA, pa...), append(gotH, ph...)
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(gotA, tc.assigned) || !slices.Equal(gotH, tc.hosted) {
			t.Errorf("%s: paged %v / %v", tc.what, gotA, gotH)
		}
	}
}

// TestServerRegionsPageBytes: names of 400 bytes end a page at 1 MiB.
func TestServerRegionsPageBytes(t *testing.T) {
	var all []string
	for i := range 5000 {
		all = append(all, fmt.Sprintf("%05d%s", i, strings.Repeat("x", 400)))
	}
	a, h, next := serverRegionsPage(all, all, false, 100_000)
	if n := len(a) + len(h); next == "" || n*404 > maxServerRegionsPageBytes || len(a) != len(h) || next != a[len(a)-1] {
		t.Errorf("%d assigned, %d hosted, next %q", len(a), len(h), next)
	}
}

func sortedAfter(list []string, after string) int {
	i, _ := slices.BinarySearch(list, after)
	if i < len(list) && list[i] == after {
		i++
	}
	return i
}
