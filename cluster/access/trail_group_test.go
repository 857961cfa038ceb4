package access

import (
	"context"
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

// foldingState is a seqState whose node folds placeholders (Folding).
type foldingState struct {
	*seqState
	folder *raftfsm.Folder
}

func (s *foldingState) SetFolder(f *raftfsm.Folder) { s.folder = f }

// groupingTrail is a trail over a folding state, at cluster version
// *format.
func groupingTrail(t testing.TB, format *version.Format) (*Trail, *foldingState) {
	t.Helper()
	st := &foldingState{seqState: newSeqState()}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	l, err := NewTrail(st, TrailConfig{Clock: clock.NewManual(time.Unix(1_000_000, 0)), Retention: time.Hour, MaxRecords: 1000, MaxPerPrincipal: 1000, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &sync.WaitGroup{}, Log: hclog.NewNullLogger(),
		Format: func() version.Format { return *format }})
	if err != nil {
		t.Fatal(err)
	}
	if st.folder == nil {
		t.Fatal("the trail set no folder")
	}
	return l, st
}

func served(principal string) *adminpb.AuditRecord {
	return &adminpb.AuditRecord{Principal: principal, Method: "SubmitProcedure", Code: "OK", ProcIds: []uint64{7}}
}

// TestFoldNumbersEachHoldersRunAsOneKey: the records an entry's writes
// carry are numbered at the fold, a run for each holder in the order
// each first comes, each run one key; a record whose write the entry does
// not carry is numbered nowhere, and its placeholder forgotten; a
// placeholder the trail never handed out fails the fold.
func TestFoldNumbersEachHoldersRunAsOneKey(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	recs := []*adminpb.AuditRecord{served("alice"), served("bob"), served("alice"), served("carol"), served("bob")}
	var keys []string
	st.under(func() {
		for _, r := range recs {
			muts, done, ok := l.Carry(r)
			if !ok || done == nil || len(muts) != 1 || !strings.HasPrefix(muts[0].Key, raftfsm.PlaceholderPrefix) {
				t.Fatalf("Carry at cluster version 2: %v %v", muts, ok)
			}
			keys = append(keys, muts[0].Key)
		}
	})
	// carol's write failed before the entry was proposed.
	carried := []string{keys[0], keys[1], keys[2], keys[4]}
	var muts []raftfsm.Mutation
	var done func(error)
	st.under(func() {
		var err error
		if muts, done, err = st.folder.Fold(carried); err != nil {
			t.Fatal(err)
		}
	})
	want := map[string][]string{
		AuditPrefix + AuditGroupSuffix(1, 1, 2): {"1-1", "1-2"}, // alice's, first come
		AuditPrefix + AuditGroupSuffix(1, 3, 4): {"1-3", "1-4"}, // bob's
	}
	if len(muts) != len(want) {
		t.Fatalf("fold wrote %d mutations, want %d: %v", len(muts), len(want), muts)
	}
	for _, m := range muts {
		ids, ok := want[m.Key]
		if !ok || m.Op != raftfsm.OpPut {
			t.Fatalf("unexpected mutation %v %q", m.Op, m.Key)
		}
		stored := StoredRecords(strings.TrimPrefix(m.Key, AuditPrefix), m.Value)
		if len(stored) != len(ids) {
			t.Fatalf("%s holds %d records", m.Key, len(stored))
		}
		for i, sr := range stored {
			var r adminpb.AuditRecord
			if err := proto.Unmarshal(sr.Value, &r); err != nil || r.GetId() != ids[i] || r.GetCommittedUnixMs() == 0 {
				t.Fatalf("%s record %d: %v (%v), want id %s", m.Key, i, &r, err, ids[i])
			}
		}
	}
	if recs[0].GetId() != "1-1" || recs[2].GetId() != "1-2" || recs[1].GetId() != "1-3" || recs[4].GetId() != "1-4" {
		t.Fatalf("the callers' records are numbered %s %s %s %s", recs[0].GetId(), recs[2].GetId(), recs[1].GetId(), recs[4].GetId())
	}
	if recs[3].GetId() != "" {
		t.Fatalf("the record of a write the entry did not carry was numbered %s", recs[3].GetId())
	}
	done(nil)
	st.apply(muts)
	kv := sortedKV{}
	st.Scan("", func(k string, v []byte) bool { kv[k] = v; return true })
	page := ListPage(kv, &adminpb.ListAuditRequest{}, "", 10)
	if len(page.GetRecords()) != 4 {
		t.Fatalf("listed %d records, want 4", len(page.GetRecords()))
	}
	// carol's placeholder went with the fold: it stands for nothing now.
	st.under(func() {
		if _, _, err := st.folder.Fold([]string{keys[3]}); err == nil {
			t.Fatal("a placeholder of a write no entry carried folded")
		}
	})
	// The next entry's runs follow the last number.
	st.under(func() {
		m, _, _ := l.Carry(served("dave"))
		muts, _, err := st.folder.Fold([]string{m[0].Key})
		if err != nil || len(muts) != 1 || muts[0].Key != AuditPrefix+AuditGroupSuffix(1, 5, 5) {
			t.Fatalf("the next fold: %v %v", muts, err)
		}
	})
}

// TestCarryWritesAloneBelowFormat2: below cluster version 2, and for a
// record that is PENDING or a refusal, Carry writes the record under a
// key of its own, as 0.1.0 writes it; from 2 on, a placeholder.
func TestCarryWritesAloneBelowFormat2(t *testing.T) {
	f := version.Format1
	l, st := groupingTrail(t, &f)
	carry := func(r *adminpb.AuditRecord) []raftfsm.Mutation {
		var muts []raftfsm.Mutation
		st.under(func() { muts, _, _ = l.Carry(r) })
		return muts
	}
	if muts := carry(served("alice")); len(muts) == 0 || muts[0].Key != AuditKey(1, 1) {
		t.Fatalf("at version 1: %v", muts)
	}
	f = version.Format2
	pending := served("alice")
	pending.Code = AuditPending
	refused := served("alice")
	refused.Refused = true
	if muts := carry(pending); len(muts) == 0 || strings.HasPrefix(muts[0].Key, raftfsm.PlaceholderPrefix) {
		t.Fatalf("a PENDING record at version 2: %v", muts)
	}
	if muts := carry(refused); len(muts) == 0 || strings.HasPrefix(muts[0].Key, raftfsm.PlaceholderPrefix) {
		t.Fatalf("a refusal at version 2: %v", muts)
	}
	if muts := carry(served("alice")); len(muts) != 1 || !strings.HasPrefix(muts[0].Key, raftfsm.PlaceholderPrefix) {
		t.Fatalf("at version 2: %v", muts)
	}
}

// TestFoldCutsRunsBelowTheQuota: a holder's run longer than an eighth of
// its quota is cut into groups of at most that many, numbered on; so a
// holder past its quota, which loses whole groups, keeps at least seven
// eighths of it, never the group just written.
func TestFoldCutsRunsBelowTheQuota(t *testing.T) {
	f := version.Format2
	st := &foldingState{seqState: newSeqState()}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	l, err := NewTrail(st, TrailConfig{Clock: clock.NewManual(time.Unix(1_000_000, 0)), Retention: time.Hour, MaxRecords: 1000, MaxPerPrincipal: 16, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &sync.WaitGroup{}, Log: hclog.NewNullLogger(),
		Format: func() version.Format { return f }})
	if err != nil {
		t.Fatal(err)
	}
	l.warm() // the index known, as on a leader that has written before
	fold := func(n int) []raftfsm.Mutation {
		var muts []raftfsm.Mutation
		st.under(func() {
			var keys []string
			for range n {
				m, _, _ := l.Carry(served("alice"))
				keys = append(keys, m[0].Key)
			}
			var done func(error)
			if muts, done, err = st.folder.Fold(keys); err != nil {
				t.Fatal(err)
			}
			st.apply(muts)
			done(nil)
		})
		return muts
	}
	muts := fold(5)
	var keys []string
	for _, m := range muts {
		keys = append(keys, m.Key)
	}
	want := []string{AuditPrefix + AuditGroupSuffix(1, 1, 2), AuditPrefix + AuditGroupSuffix(1, 3, 4), AuditPrefix + AuditGroupSuffix(1, 5, 5)}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("a run of 5 at a quota of 16: %q, want %q", keys, want)
	}
	// Far past the quota: whole groups go, the oldest first, and alice
	// keeps 15 or 16 of her records, the newest among them.
	for range 10 {
		fold(7)
	}
	kv := sortedKV{}
	st.Scan("", func(k string, v []byte) bool { kv[k] = v; return true })
	page := ListPage(kv, &adminpb.ListAuditRequest{}, "", 100)
	n := len(page.GetRecords())
	if n < 15 || n > 16 || page.GetRecords()[n-1].GetId() != "1-75" {
		t.Fatalf("alice keeps %d records, the newest %s; want 15 or 16, the newest 1-75", n, page.GetRecords()[n-1].GetId())
	}
}
