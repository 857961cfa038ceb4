package domain

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/baton-dev/baton/raftfsm"
)

// mapReader reads a map as the FSM is read: a scan in key order.
func mapReader(kv map[string][]byte) reader {
	return kvReader{
		Get: func(k string) ([]byte, bool) { v, ok := kv[k]; return v, ok },
		Scan: func(prefix string, fn func(string, []byte) bool) {
			keys := make([]string, 0, len(kv))
			for k := range kv {
				if strings.HasPrefix(k, prefix) {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				if !fn(k, kv[k]) {
					return
				}
			}
		},
	}
}

// The records keep a window of the last maxRepairRecords: a new record
// deletes those it pushes out, a bounded number at a time, so a backlog
// (records written before the window existed) drains over a few calls.
func TestRepairRecordsPrunedToTheWindow(t *testing.T) {
	kv := map[string][]byte{"repair/junk": nil, "region/x": nil}
	apply := func(muts []raftfsm.Mutation) {
		for _, m := range muts {
			if m.Op != raftfsm.OpDelete {
				t.Fatalf("prune wrote %v %s", m.Op, m.Key)
			}
			delete(kv, m.Key)
		}
	}
	// Within the window nothing goes.
	for seq := uint64(1); seq <= maxRepairRecords; seq++ {
		kv[RepairKey(seq)] = nil
	}
	if muts, err := repairsToPrune(mapReader(kv), maxRepairRecords); err != nil || len(muts) != 0 {
		t.Fatalf("within the window: %v, %v", muts, err)
	}
	// The next record pushes the first one out, and only it.
	muts, err := repairsToPrune(mapReader(kv), maxRepairRecords+1)
	if err != nil || len(muts) != 1 || muts[0].Key != RepairKey(1) {
		t.Fatalf("record %d: %v, %v; want record 1 deleted", maxRepairRecords+1, muts, err)
	}
	apply(muts)
	kv[RepairKey(maxRepairRecords+1)] = nil
	// A backlog of 100 over the window drains repairPruneBatch at a time.
	for seq := uint64(maxRepairRecords + 2); seq <= maxRepairRecords+101; seq++ {
		kv[RepairKey(seq)] = nil
	}
	next := uint64(maxRepairRecords + 102)
	for calls := 0; ; calls++ {
		muts, err := repairsToPrune(mapReader(kv), next)
		if err != nil || len(muts) > repairPruneBatch {
			t.Fatalf("record %d: %d deletions, %v", next, len(muts), err)
		}
		if len(muts) == 0 {
			break
		}
		if calls > 3 {
			t.Fatal("the backlog does not drain")
		}
		apply(muts)
	}
	n := 0
	for k := range kv {
		if strings.HasPrefix(k, repairPrefix) && k != "repair/junk" {
			n++
		}
	}
	// next is about to be written: the window holds the others.
	if n != maxRepairRecords-1 {
		t.Fatalf("%d records kept; want %d", n, maxRepairRecords-1)
	}
	if _, ok := kv[RepairKey(next-maxRepairRecords)]; ok {
		t.Fatalf("record %d, out of the window, was kept", next-maxRepairRecords)
	}
	if _, ok := kv[RepairKey(next-maxRepairRecords+1)]; !ok {
		t.Fatalf("record %d, the oldest of the window, was deleted", next-maxRepairRecords+1)
	}
	if _, ok := kv["repair/junk"]; !ok {
		t.Fatal("a key under repair/ that is not a record was deleted")
	}
}

// What a record keeps is cut to its bounds, on a rune boundary, saying how
// long it was.
func TestRepairRecordBounded(t *testing.T) {
	huge := strings.Repeat("é", 1<<19) // 1 MiB of two-byte runes
	r := RepairRecord{Action: "region assign", Args: map[string]string{"region": huge, "server": "rs1"},
		Caller: huge, Peer: "127.0.0.1:1", Result: huge + huge}.bounded()
	for what, s := range map[string]string{"region": r.Args["region"], "caller": r.Caller} {
		if len(s) > maxRecordValue+32 || !utf8.ValidString(s) || !strings.HasSuffix(s, fmt.Sprintf("(%d bytes)", len(huge))) {
			t.Errorf("%s cut to %d bytes (valid UTF-8 %v): ...%s", what, len(s), utf8.ValidString(s), s[max(len(s)-20, 0):])
		}
	}
	if len(r.Result) > maxRecordResult+32 || !utf8.ValidString(r.Result) {
		t.Errorf("result cut to %d bytes", len(r.Result))
	}
	if r.Args["server"] != "rs1" || r.Peer != "127.0.0.1:1" || r.Action != "region assign" {
		t.Errorf("short fields changed: %+v", r.Args)
	}
}
