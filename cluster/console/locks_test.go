package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-dev/baton/proto/adminpb"
)

func party(id, root uint64) *adminpb.LockParty {
	return &adminpb.LockParty{ProcId: id, RootId: root, Mode: "exclusive"}
}

func lockEntry(name string, holders []*adminpb.LockParty, waiters ...*adminpb.LockParty) *adminpb.LockEntry {
	return &adminpb.LockEntry{Kind: "table", Name: name, Holders: holders, Waiters: waiters}
}

// render shows a chain as "waiter>lock>holders; … => blocker".
func (ch chain) String() string {
	var parts []string
	for _, l := range ch.Links {
		var hs []string
		for _, h := range l.Holders {
			hs = append(hs, fmt.Sprint(h.GetProcId()))
		}
		parts = append(parts, fmt.Sprintf("%d>%s>%s", l.Waiter.GetProcId(), l.Lock.GetName(), strings.Join(hs, ",")))
	}
	end := "none"
	switch {
	case ch.Cycle:
		end = "cycle"
	case ch.Blocker != nil:
		end = fmt.Sprint(ch.Blocker.GetProcId())
	}
	return strings.Join(parts, "; ") + " => " + end
}

func TestChains(t *testing.T) {
	for _, tc := range []struct {
		name  string
		locks []*adminpb.LockEntry
		want  []string
	}{
		{"nobody waits", []*adminpb.LockEntry{lockEntry("a", []*adminpb.LockParty{party(1, 1)})}, nil},
		{"one waiter", []*adminpb.LockEntry{lockEntry("a", []*adminpb.LockParty{party(1, 1)}, party(2, 2))}, []string{"2>a>1 => 1"}},
		{
			// 5 (a child of 4) waits for b, held by 3, which waits for a,
			// held by 1: one line down to 1; 6 queues behind 5 for b.
			"a line of two",
			[]*adminpb.LockEntry{
				lockEntry("a", []*adminpb.LockParty{party(1, 1)}, party(3, 3)),
				lockEntry("b", []*adminpb.LockParty{party(3, 3)}, party(5, 4), party(6, 6)),
			},
			[]string{"5>b>3; 3>a>1 => 1", "6>b>3; 3>a>1 => 1"},
		},
		{
			"shared holders: the one that waits goes on",
			[]*adminpb.LockEntry{
				lockEntry("a", []*adminpb.LockParty{party(1, 1), party(2, 2)}, party(9, 9)),
				lockEntry("b", []*adminpb.LockParty{party(7, 7)}, party(2, 2)),
			},
			[]string{"9>a>1,2; 2>b>7 => 7"},
		},
		{
			"a cycle",
			[]*adminpb.LockEntry{
				lockEntry("a", []*adminpb.LockParty{party(1, 1)}, party(2, 2)),
				lockEntry("b", []*adminpb.LockParty{party(2, 2)}, party(1, 1)),
			},
			[]string{"1>b>2; 2>a>1 => cycle"},
		},
		{"not held: behind the first waiter", []*adminpb.LockEntry{lockEntry("a", nil, party(4, 4), party(5, 5))}, []string{"4>a> => none", "5>a> => 4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, ch := range chains(tc.locks) {
				got = append(got, ch.String())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("chains %q, want %q", got, tc.want)
			}
		})
	}
}
