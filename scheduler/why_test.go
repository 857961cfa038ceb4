package scheduler

import (
	"slices"
	"testing"
)

func TestWhy(t *testing.T) {
	s := New(Config{Wake: func(uint64) {}})
	s.Acquire(1, tbl("t"), nil, RegionLocks("ns", "t", "r1"))
	s.Acquire(2, tbl("t"), nil, RegionLocks("ns", "t", "r2"))
	s.Acquire(3, tbl("t"), nil, TableLocks("ns", "t", Exclusive))
	s.Acquire(4, tbl("t"), nil, TableLocks("ns", "t", Exclusive))
	s.Acquire(5, tbl("t"), nil, ServerLocks("rs1", Exclusive))
	s.Acquire(6, tbl("t"), nil, ServerLocks("rs1", Shared))
	ev := NewEvent("region r1 opened on rs1")
	s.WaitEvent(ev, 1, tbl("t"))
	s.AddBack(7, tbl("t"))

	tests := []struct {
		id   uint64
		want WaitInfo
		text string
	}{
		{1, WaitInfo{ID: 1, Event: "region r1 opened on rs1", Held: RegionLocks("ns", "t", "r1")[1:]},
			"proc 1: waiting for event region r1 opened on rs1; holds table ns:t (shared), region r1 (exclusive)"},
		{3, WaitInfo{ID: 3, Lock: &Lock{LockTable, "ns:t", Exclusive}, Holders: []uint64{1, 2}},
			"proc 3: waiting for lock table ns:t (exclusive), held shared by 1, 2"},
		{4, WaitInfo{ID: 4, Lock: &Lock{LockTable, "ns:t", Exclusive}, Holders: []uint64{1, 2}, Ahead: []uint64{3}},
			"proc 4: waiting for lock table ns:t (exclusive), held shared by 1, 2, behind waiters 3"},
		{6, WaitInfo{ID: 6, Lock: &Lock{LockServer, "rs1", Shared}, Holders: []uint64{5}, Exclusive: true},
			"proc 6: waiting for lock server rs1 (shared), held exclusive by 5"},
		{7, WaitInfo{ID: 7, Queued: true}, "proc 7: queued to run"},
		{8, WaitInfo{ID: 8}, "proc 8: not queued or waiting (running, done or unknown)"},
	}
	for _, tc := range tests {
		got := s.Why(tc.id)
		// Held includes the namespace lock too; compare what matters.
		if tc.id == 1 {
			tc.want.Held = []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Shared}, {LockRegion, "r1", Exclusive}}
			tc.text = "proc 1: waiting for event region r1 opened on rs1; holds namespace ns (shared), table ns:t (shared), region r1 (exclusive)"
		}
		if got.ID != tc.want.ID || got.Queued != tc.want.Queued || got.Event != tc.want.Event ||
			got.Exclusive != tc.want.Exclusive || !slices.Equal(got.Holders, tc.want.Holders) ||
			!slices.Equal(got.Held, tc.want.Held) || !slices.Equal(got.Ahead, tc.want.Ahead) ||
			(got.Lock == nil) != (tc.want.Lock == nil) || got.Lock != nil && *got.Lock != *tc.want.Lock {
			t.Errorf("Why(%d) = %+v, want %+v", tc.id, got, tc.want)
		}
		if s := got.String(); s != tc.text {
			t.Errorf("Why(%d).String()\n got %q\nwant %q", tc.id, s, tc.text)
		}
	}
}
