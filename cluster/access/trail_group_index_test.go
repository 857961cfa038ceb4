package access

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// quotaTrail is a grouping trail (cluster version 2) over a folding
// state, with a ceiling of max records and perPrincipal each.
func quotaTrail(t *testing.T, max, perPrincipal int, clk clock.Clock) (*Trail, *foldingState) {
	t.Helper()
	st := &foldingState{seqState: newSeqState()}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f := version.Format2
	l, err := NewTrail(st, TrailConfig{Clock: clk, Retention: time.Hour, MaxRecords: max, MaxPerPrincipal: perPrincipal, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &sync.WaitGroup{}, Log: hclog.NewNullLogger(),
		Format: func() version.Format { return f }})
	if err != nil {
		t.Fatal(err)
	}
	return l, st
}

// foldRecords carries recs under the Sequencer, folds them and applies the
// entry.
func foldRecords(t *testing.T, l *Trail, st *foldingState, recs ...*adminpb.AuditRecord) []raftfsm.Mutation {
	t.Helper()
	var muts []raftfsm.Mutation
	var done func(error)
	st.under(func() {
		var keys []string
		for _, r := range recs {
			m, _, ok := l.Carry(r)
			if !ok {
				t.Fatal("not carried")
			}
			keys = append(keys, m[0].Key)
		}
		var err error
		if muts, done, err = st.folder.Fold(keys); err != nil {
			t.Fatal(err)
		}
		st.apply(muts)
	})
	done(nil)
	return muts
}

func holderCounts(st *foldingState) map[string]int {
	n := map[string]int{}
	st.Scan(AuditPrefix, func(k string, v []byte) bool {
		for _, r := range StoredRecords(strings.TrimPrefix(k, AuditPrefix), v) {
			var rec adminpb.AuditRecord
			if err := protoUnmarshal(r.Value, &rec); err == nil {
				n[rec.GetPrincipal()]++
			}
		}
		return true
	})
	return n
}

// TestEntryPastTheQuotaKeepsItsNewestRecords: a holder whose entry
// carries more of its records than its quota keeps the newest of them
// listable: its run is cut into groups below the quota, so the quota
// takes the older ones, never the whole run (before the cut, the group
// just committed was deleted in its own entry, and none of the calls
// just answered OK could be listed).
func TestEntryPastTheQuotaKeepsItsNewestRecords(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	l, st := quotaTrail(t, 1000, 3, clk)
	// Build the index first (as Run's warm would).
	l.warm()
	recs := []*adminpb.AuditRecord{served("alice"), served("alice"), served("alice"), served("alice"), served("alice")}
	muts := foldRecords(t, l, st, recs...)
	var ops []string
	for _, m := range muts {
		ops = append(ops, fmt.Sprintf("%v %s", m.Op, m.Key))
	}
	if n := holderCounts(st)["alice"]; n == 0 {
		t.Fatalf("alice's 5 calls, answered OK, committed and pruned in the same entry: 0 records listable (quota 3). Mutations: %q", ops)
	}
	if n := holderCounts(st)["alice"]; n != 3 {
		t.Fatalf("alice keeps %d records at a quota of 3 (groups of one there): want 3", n)
	}
}

// TestIndexMatchesStateUnderFolds: the leader's index counts what
// the state holds, through folds, single records and quota prunes; no
// holder under its quota loses a record.
func TestIndexMatchesStateUnderFolds(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	l, st := quotaTrail(t, 60, 20, clk)
	l.warm()
	rng := rand.New(rand.NewSource(3))
	ps := []string{"alice", "bob", "carol", "dave"}
	for step := 0; step < 300; step++ {
		if rng.Intn(4) == 0 {
			r := served(ps[rng.Intn(len(ps))])
			r.Method = "AclGrant"
			if err := l.Commit([]*adminpb.AuditRecord{r}); err != nil {
				t.Fatal(err)
			}
		} else {
			var recs []*adminpb.AuditRecord
			for i := 0; i < 1+rng.Intn(6); i++ {
				recs = append(recs, served(ps[rng.Intn(len(ps))]))
			}
			foldRecords(t, l, st, recs...)
		}
		l.mu.Lock()
		x := l.spaces[0].idx
		l.mu.Unlock()
		if x == nil {
			l.warm()
			continue
		}
		fresh := l.spaces[0].BuildIndex(st.Scan, func(string) bool { return false })
		if x.records != fresh.records || len(x.groupsOf) != len(fresh.groupsOf) {
			t.Fatalf("step %d: index %d records %d keys, state %d records %d keys", step, x.records, len(x.groupsOf), fresh.records, len(fresh.groupsOf))
		}
		for g, gr := range fresh.groups {
			if x.groups[g] == nil || x.groups[g].live != gr.live || x.groups[g].liveKeys != gr.liveKeys {
				t.Fatalf("step %d: group %s", step, g)
			}
		}
		if fresh.records > 60 {
			t.Fatalf("step %d: %d records past the ceiling", step, fresh.records)
		}
		for g, gr := range fresh.groups {
			if gr.live > 20 {
				t.Fatalf("step %d: %s holds %d past its quota", step, g, gr.live)
			}
		}
	}
}

// TestFoldRetentionKeepsGroupUntilNewest: a group whose oldest
// record is past the retention but newest is not stays.
func TestFoldRetentionKeepsGroupUntilNewest(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	l, st := quotaTrail(t, 1000, 1000, clk)
	l.warm()
	old := served("alice")
	old.CommittedUnixMs = clk.Now().Add(-2 * time.Hour).UnixMilli()
	foldRecords(t, l, st, old, served("alice"))
	clk.Advance(30 * time.Minute)
	foldRecords(t, l, st, served("bob"))
	if n := holderCounts(st)["alice"]; n != 2 {
		t.Fatalf("alice has %d records", n)
	}
	clk.Advance(31 * time.Minute)
	l.mu.Lock()
	l.spaces[0].quietUntil = 0
	l.mu.Unlock()
	foldRecords(t, l, st, served("bob"))
	if n := holderCounts(st)["alice"]; n != 0 {
		t.Fatalf("alice's group past the retention: %d records", n)
	}
}

func protoUnmarshal(b []byte, m *adminpb.AuditRecord) error { return proto.Unmarshal(b, m) }
