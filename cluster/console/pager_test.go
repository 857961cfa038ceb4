package console

import (
	"net/url"
	"strings"
	"testing"
)

// pagerOf keeps the filters, goes forward with the token and back through
// the tokens the URL carries, and forgets the oldest past maxBack.
func TestPagerOf(t *testing.T) {
	long := strings.TrimSuffix(strings.Repeat("t.", maxBack), ".")
	for _, tc := range []struct {
		name, query, next string
		want              pager
	}{
		{name: "one page", query: "state=OPEN", want: pager{}},
		{name: "first of several", query: "state=OPEN", next: "A",
			want: pager{NextURL: "/ui/regions?back=~&page=A&state=OPEN"}},
		{name: "second", query: "state=OPEN&page=A&back=~", next: "B",
			want: pager{FirstURL: "/ui/regions?state=OPEN", PrevURL: "/ui/regions?state=OPEN", NextURL: "/ui/regions?back=~.A&page=B&state=OPEN"}},
		{name: "third, the last", query: "page=B&back=~.A",
			want: pager{FirstURL: "/ui/regions", PrevURL: "/ui/regions?back=~&page=A"}},
		{name: "the way back is bounded", query: "page=Z&back=" + long, next: "N",
			want: pager{FirstURL: "/ui/regions", PrevURL: "/ui/regions?back=" + url.QueryEscape(long[:len(long)-2]) + "&page=t",
				NextURL: "/ui/regions?back=" + url.QueryEscape(long[2:]+".Z") + "&page=N"}},
		{name: "empty filters dropped", query: "table=&server=", next: "A",
			want: pager{NextURL: "/ui/regions?back=~&page=A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := pagerOf("/ui/regions", q, tc.next); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
