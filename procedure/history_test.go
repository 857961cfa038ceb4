package procedure

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// storedInfo reads procedure id back from st as a standby's reads do.
func storedInfo(t *testing.T, st store.Store, id uint64) Info {
	t.Helper()
	data, found := storedData(t, st, id)
	if !found {
		t.Fatalf("procedure %d not in the store", id)
	}
	out, err := DecodeInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A state machine's history has one transition per state it persisted, in
// order, each naming the node, and the stored record reads back the same.
func TestHistoryRecordsEachStep(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), func(c *Config) { c.Node = "m1" })
	id := h.submit(newSM("hist", 4), SubmitOptions{})
	info := h.wait(id)
	if info.State != Success {
		t.Fatalf("state %s", info.State)
	}
	// Submission (next state 0), then states 1, 2, 3 persisted as the
	// machine moves on, then the SUCCESS write.
	var steps []int32
	for _, tr := range info.History {
		if tr.Node != "m1" || tr.At.IsZero() || tr.Until.Before(tr.At) || tr.Writes == 0 {
			t.Fatalf("transition %+v: want node m1, times and writes", tr)
		}
		steps = append(steps, tr.Step)
	}
	if first := info.History[0]; first.State != Runnable || first.Depth != 0 {
		t.Fatalf("first transition %+v: want the submission (RUNNABLE, nothing executed)", first)
	}
	if last := info.History[len(info.History)-1]; last.State != Success {
		t.Fatalf("last transition %+v: want SUCCESS", last)
	}
	// (A finished procedure's rollback stack is dropped: its depth is 0.)
	for i := 1; i < len(info.History)-1; i++ {
		if info.History[i].Depth < info.History[i-1].Depth {
			t.Fatalf("depth went down rolling forward: %+v", info.History)
		}
	}
	if len(steps) < 4 {
		t.Fatalf("history %+v: want a transition per state", info.History)
	}
	stored := storedInfo(t, st, id)
	if len(stored.History) != len(info.History) {
		t.Fatalf("stored history %+v, executor's %+v", stored.History, info.History)
	}
	for i := range stored.History {
		a, b := stored.History[i], info.History[i]
		// Times are stored in milliseconds after submission.
		if a.State != b.State || a.Step != b.Step || a.Depth != b.Depth || a.Node != b.Node || a.Writes != b.Writes ||
			a.At.Sub(b.At).Abs() > time.Millisecond {
			t.Fatalf("stored transition %d %+v, executor's %+v", i, a, b)
		}
	}
}

// A procedure that fails shows its rollback in the history: transitions
// marked RollingBack after the failure, their depth going down.
func TestHistoryShowsTheRollbackPath(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), func(c *Config) { c.Node = "m1" })
	p := newSteps("rb", 4)
	p.FailAt = 2
	id := h.submit(p, SubmitOptions{})
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("state %s, want ROLLEDBACK", info.State)
	}
	stored := storedInfo(t, st, id)
	rolling := 0
	for _, tr := range stored.History {
		if tr.RollingBack {
			rolling++
		}
	}
	if rolling == 0 || stored.History[len(stored.History)-1].State != RolledBack {
		t.Fatalf("history %+v: want rollback transitions ending ROLLEDBACK", stored.History)
	}
}

// A long procedure keeps a bounded history: the submission and the latest
// transitions.
func TestHistoryIsBounded(t *testing.T) {
	var h []Transition
	t0 := time.Unix(1000, 0)
	for i := range 500 {
		h = noteTransition(h, Transition{State: Runnable, Step: -1, Depth: int32(i), Node: "m1", At: t0.Add(time.Duration(i) * time.Second)})
	}
	if len(h) > maxHistory || len(h) < maxHistory*3/4 {
		t.Fatalf("%d transitions kept, want at most %d and at least %d", len(h), maxHistory, maxHistory*3/4)
	}
	if h[0].Depth != 0 || h[len(h)-1].Depth != 499 || int(h[len(h)-1].Depth-h[1].Depth) != len(h)-2 {
		t.Fatalf("kept depths %d, %d … %d: want the first and the latest", h[0].Depth, h[1].Depth, h[len(h)-1].Depth)
	}
	// A write that leaves the procedure where it was extends the last one.
	n := len(h)
	h = noteTransition(h, Transition{State: Runnable, Step: -1, Depth: 499, Node: "m1", At: t0.Add(time.Hour), Attempt: 3})
	if last := h[len(h)-1]; len(h) != n || last.Writes != 2 || last.Attempt != 3 || !last.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("last transition %+v: want the repeated write merged into it", last)
	}
	hist := loadedHistory(h, t0)
	enc, last := hist.encoded()
	rec := record{id: 1, root: 1, submitted: t0.UnixNano(), historyEnc: enc, historyLast: last}
	var back record
	if err := back.unmarshal(rec.marshal()); err != nil {
		t.Fatal(err)
	}
	if len(back.history) != len(h) || back.history[5] != h[5] {
		t.Fatalf("history read back %+v…, want %+v…", back.history[5], h[5])
	}
	// The encoding kept incrementally across trims and merges is the one
	// the list would get afresh.
	var inc history
	for i := range 300 {
		inc.note(Transition{State: Runnable, Step: int32(i % 3), Depth: int32(i / 2), Node: "m1", At: t0.Add(time.Duration(i) * time.Second)}, t0)
	}
	gotDone, gotLast := inc.encoded()
	fresh := loadedHistory(inc.list, t0)
	wantDone, wantLast := fresh.encoded()
	if string(gotDone) != string(wantDone) || string(gotLast) != string(wantLast) {
		t.Fatalf("incremental encoding differs from a fresh one (%d+%d bytes, want %d+%d)", len(gotDone), len(gotLast), len(wantDone), len(wantLast))
	}
}

// A record's Summary says what its Info says of the fields listings filter
// on, and a Filter matches both alike.
func TestDecodeSummaryAgreesWithInfo(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), nil)
	a := h.submit(newSteps("a", 2), SubmitOptions{Owner: "alice"})
	b := h.submit(newSM("b", 2), SubmitOptions{Owner: "bob"})
	h.wait(a)
	h.wait(b)
	for _, id := range []uint64{a, b} {
		var data []byte
		if _, err := st.Load(func(p store.Proc) error {
			if p.ID == id {
				data = p.Data
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		info, err := DecodeInfo(data)
		if err != nil {
			t.Fatal(err)
		}
		s, err := DecodeSummary(data)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID != info.ID || s.RootID != info.RootID || s.ParentID != info.ParentID || string(s.Type) != info.Type ||
			string(s.Owner) != info.Owner || s.State != info.State || !s.Submitted.Equal(info.Submitted) ||
			!s.Updated.Equal(info.Updated) || s.Paused != info.Paused {
			t.Fatalf("summary %+v disagrees with info %+v", s, info)
		}
		for _, f := range []Filter{
			{Owner: "alice"}, {Owner: "bob", Type: "sm"}, {States: []State{Success}},
			{SubmittedAfter: info.Submitted}, {SubmittedBefore: info.Submitted},
			{SubmittedAfter: info.Submitted.Add(-time.Hour), SubmittedBefore: info.Submitted.Add(time.Hour)},
		} {
			if f.Match(info) != f.MatchSummary(s) {
				t.Errorf("filter %+v: Match %v, MatchSummary %v", f, f.Match(info), f.MatchSummary(s))
			}
		}
	}
	if got := h.x.List(Filter{Owner: "bob"}); len(got) != 1 || got[0].ID != b {
		t.Fatalf("List(owner bob) = %+v, want procedure %d alone", got, b)
	}
}
