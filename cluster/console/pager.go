package console

import (
	"net/url"
	"strings"
)

// The tables, regions and servers pages show one page of the masters'
// paged lists at a time (never a whole list: at a million regions no
// answer could hold it). Page tokens only go forward, so the way back is
// carried in the URL: "back" holds the tokens of the pages before, the
// newest last (at most maxBack of them; older ones are forgotten, and
// "first page" always works).

// maxBack bounds the way back a URL carries.
const maxBack = 20

// firstPageMark stands for the first page (whose token is empty) in back.
const firstPageMark = "~"

// pager is the links of a paged view: FirstURL (set past the first page),
// PrevURL (set when the page before is known) and NextURL (set when there
// is more).
type pager struct {
	FirstURL, PrevURL, NextURL string
}

// pagerOf builds the links of the page of path that query q shows, the
// list going on at token next ("" when done). Every other query parameter
// (the filters) is kept.
func pagerOf(path string, q url.Values, next string) pager {
	cur := q.Get("page")
	var back []string
	if b := q.Get("back"); b != "" {
		back = strings.Split(b, ".")
	}
	link := func(page string, back []string) string {
		v := pageQuery(q, page, "back")
		if len(back) > 0 {
			v.Set("back", strings.Join(back, "."))
		}
		return withQuery(path, v)
	}
	var p pager
	if cur != "" {
		p.FirstURL = link("", nil)
	}
	if n := len(back); n > 0 {
		prev := back[n-1]
		if prev == firstPageMark {
			prev = ""
		}
		p.PrevURL = link(prev, back[:n-1])
	}
	if next != "" {
		mark := cur
		if mark == "" {
			mark = firstPageMark
		}
		nb := append(append([]string{}, back...), mark)
		if len(nb) > maxBack {
			nb = nb[len(nb)-maxBack:]
		}
		p.NextURL = link(next, nb)
	}
	return p
}

// pageQuery is the query of page token page ("" for the first) of the
// listing q shows: q's set parameters (their first values) but page and
// drop, the filters a link keeps.
func pageQuery(q url.Values, page, drop string) url.Values {
	v := url.Values{}
	for k, vs := range q {
		if k != "page" && k != drop && len(vs) > 0 && vs[0] != "" {
			v.Set(k, vs[0])
		}
	}
	if page != "" {
		v.Set("page", page)
	}
	return v
}

// withQuery is path with query v, if any.
func withQuery(path string, v url.Values) string {
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}
