package raftfsm

import (
	"slices"
	"testing"
)

func TestScanKVBefore(t *testing.T) {
	tr := newKVTree()
	for _, k := range []string{"a/1", "a/2", "a/3", "ab", "b/1", "a"} {
		tr.ReplaceOrInsert(newKVItem(k, nil, 0))
	}
	walk := func(prefix, before string, n int) []string {
		var got []string
		scanKVBefore(tr, prefix, before, func(it *kvItem) bool {
			got = append(got, it.key())
			return len(got) < n
		})
		return got
	}
	for _, c := range []struct {
		prefix, before string
		n              int
		want           []string
	}{
		{"a/", "", 10, []string{"a/3", "a/2", "a/1"}},
		{"a/", "a/3", 10, []string{"a/2", "a/1"}},
		{"a/", "a/25", 10, []string{"a/2", "a/1"}},
		{"a/", "", 2, []string{"a/3", "a/2"}},
		{"b/", "", 10, []string{"b/1"}},
		{"c/", "", 10, nil},
		{"a/", "a/1", 10, nil},
	} {
		if got := walk(c.prefix, c.before, c.n); !slices.Equal(got, c.want) {
			t.Errorf("scanKVBefore(%q, %q) = %v, want %v", c.prefix, c.before, got, c.want)
		}
	}
}
