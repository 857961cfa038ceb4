package access

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// carryOne carries a served call's record of principal p in an entry of
// its own, as a submission's entry does, and fails the test if it is not.
func carryOne(t *testing.T, st *seqState, l *Trail, p string) {
	t.Helper()
	ok := false
	st.under(func() {
		var muts []raftfsm.Mutation
		var done func(error)
		if muts, done, ok = l.Carry(&adminpb.AuditRecord{Principal: p, Method: "SubmitProcedure", Code: "OK"}); ok {
			st.apply(muts)
			done(nil)
		}
	})
	if !ok {
		t.Fatal("record not carried")
	}
}

// stored counts the records under prefix.
func (s *seqState) stored(prefix string) int {
	n := 0
	s.Scan(prefix, func(string, []byte) bool { n++; return true })
	return n
}

// TestRetentionScansOnlyWhenARecordCanBeDue: numbering a record (under
// the Sequencer, which every write of the executor waits for) looks for
// expired records only when one can be due, not for every record; what
// expires is pruned all the same, on time.
func TestRetentionScansOnlyWhenARecordCanBeDue(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	l := runningTrail(t, st, clk, 100_000)

	carryOne(t, st, l, "a") // the first scans both spaces
	// Run builds the spaces' indexes the first record found unknown; its
	// scans are not under the Sequencer, but seqState would count those
	// that overlap a carry.
	testwait.For(t, 10*time.Second, "Run built the indexes", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.spaces[0].idx != nil && l.spaces[1].idx != nil
	})
	first := st.scans.Load()
	if first == 0 {
		t.Fatal("the term's first record scanned nothing for expired ones")
	}
	for range 50 {
		clk.Advance(100 * time.Millisecond)
		carryOne(t, st, l, "a")
	}
	if n := st.scans.Load() - first; n != 0 {
		t.Fatalf("%d scans for 50 records none of which could be due", n)
	}
	// What was stored expires an hour after it was written: the first
	// record numbered then prunes it.
	clk.Advance(time.Hour + time.Second)
	carryOne(t, st, l, "b")
	if n := st.stored(AuditPrefix); n != 1 {
		t.Fatalf("%d records kept an hour on, want the new one alone", n)
	}
	// Nothing stored: no record can be due before the next one's hour,
	// but the space is looked at again within quietFor all the same.
	scans := st.scans.Load()
	carryOne(t, st, l, "b")
	if st.scans.Load() != scans {
		t.Fatal("scanned again at once")
	}
	clk.Advance(quietFor)
	carryOne(t, st, l, "b")
	if st.scans.Load() == scans {
		t.Fatalf("not scanned again after %v", quietFor)
	}
	// Every write settled: none is left counted as in flight.
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, sp := range l.spaces {
		if n := len(sp.writing); n != 0 {
			t.Errorf("space %d: %d writes still counted in flight after all settled", i, n)
		}
	}
}

// TestRetentionPrunesAnOutcomeWrittenPastItsExpiry: a call's record
// begun long ago (a call served for longer than the retention) is not
// pruned while the call runs; once its outcome is written over it, the
// next record numbered prunes it, however recently the space was found
// quiet.
func TestRetentionPrunesAnOutcomeWrittenPastItsExpiry(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	l := runningTrail(t, st, clk, 100_000)

	begun := &adminpb.AuditRecord{Principal: "slow", Method: "DeleteTable", Code: AuditPending}
	if err := l.Wait(l.Start(begun)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	carryOne(t, st, l, "a") // scans: the begun record is skipped, the space goes quiet
	if n := st.stored(AuditPrefix); n != 2 {
		t.Fatalf("%d records, want the begun one kept while its call runs, and the new one", n)
	}
	outcome := &adminpb.AuditRecord{Id: begun.GetId(), Principal: "slow", Method: "DeleteTable", Code: "OK",
		CommittedUnixMs: begun.GetCommittedUnixMs()}
	st.under(func() {
		w, err := l.number([]*adminpb.AuditRecord{outcome}, false)
		if err != nil {
			t.Fatal(err)
		}
		st.apply(w.all())
		l.settle(w, nil)
	})
	carryOne(t, st, l, "a")
	st.Scan(AuditPrefix, func(k string, _ []byte) bool {
		if k == AuditPrefix+AuditSuffix(1, 1) {
			t.Errorf("the record begun %v ago is kept after its outcome", 2*time.Hour)
		}
		return true
	})
}

// TestRetentionPrunesAgainAfterAFailedWrite: the deletions of a write
// that failed are skipped by no later scan: the next record numbered
// prunes what they would have, however recently the space was found quiet.
func TestRetentionPrunesAgainAfterAFailedWrite(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	l := runningTrail(t, st, clk, 100_000)
	for range 3 {
		carryOne(t, st, l, "a")
	}
	clk.Advance(time.Hour + time.Second)
	st.under(func() {
		w, err := l.number([]*adminpb.AuditRecord{{Principal: "a", Method: "SubmitProcedure", Code: "OK"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.prune) != 3 {
			t.Fatalf("%d prunes due, want the 3 expired records", len(w.prune))
		}
		l.settle(w, errors.New("the entry was lost"))
	})
	carryOne(t, st, l, "a")
	if n := st.stored(AuditPrefix); n != 1 {
		t.Fatalf("%d records after a failed write's retry, want the one just carried", n)
	}
}

// TestRetentionKeepsAnInFlightRecordsExpiry: a record numbered as its
// entry is proposed is not in the state until the entry applies; a scan
// of its space meanwhile (another record's write, here refusals' and the
// idle prune) cannot see it, and must not go quiet past its expiry: it is
// pruned once expired, not a quietFor later.
func TestRetentionKeepsAnInFlightRecordsExpiry(t *testing.T) {
	const retention = time.Second
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	stop := make(chan struct{})
	var loops sync.WaitGroup
	l, err := NewTrail(st, TrailConfig{Clock: clk, Retention: retention, MaxRecords: 100_000, MaxPerPrincipal: 100_000, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &loops, Log: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	loops.Add(1)
	go l.Run()
	t.Cleanup(func() { close(stop); loops.Wait() })

	// A served call's record, carried: its entry in flight.
	var muts []raftfsm.Mutation
	var done func(error)
	ok := false
	st.under(func() {
		muts, done, ok = l.Carry(&adminpb.AuditRecord{Principal: "a", Method: "SubmitProcedure", Code: "OK"})
	})
	if !ok {
		t.Fatal("not carried")
	}
	// A refusal numbered meanwhile: its write scans both spaces, the
	// carried record not applied yet.
	clk.Advance(2 * retention)
	refuse := func() {
		st.under(func() {
			w, err := l.number([]*adminpb.AuditRecord{{Principal: "x", Method: "SubmitProcedure", Code: "PermissionDenied", Refused: true}}, false)
			if err != nil {
				t.Fatal(err)
			}
			st.apply(w.all())
			l.settle(w, nil)
		})
	}
	refuse()
	st.apply(muts) // the carried record's entry commits
	done(nil)
	clk.Advance(time.Second)
	refuse()
	if err := l.Commit(nil); err != nil { // the idle prune Run makes every pruneEvery
		t.Fatal(err)
	}
	if n := st.stored(AuditPrefix); n != 0 {
		t.Errorf("%d served-call records kept %v after their %v retention ended", n, 2*time.Second, retention)
	}
}
