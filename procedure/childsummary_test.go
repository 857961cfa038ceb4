package procedure

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/store"
)

// TestChildSummariesRoundTrip: a finished root's record carries its
// descendants' summaries (field 113) through marshal and unmarshal, and
// they decode to what went in: ids, parents (the root's or another
// descendant's), types, states, times to the millisecond, errors cut at
// maxSummaryError on a rune boundary.
func TestChildSummariesRoundTrip(t *testing.T) {
	base := time.Unix(1e6, 123_456_789)
	long := strings.Repeat("é", maxSummaryError) // 2 bytes a rune
	list := []ChildSummary{
		{ID: 11, ParentID: 10, Type: "child", State: Success, Submitted: base.Add(time.Millisecond), Finished: base.Add(40 * time.Millisecond)},
		{ID: 12, ParentID: 10, Type: "parent", State: Success, Submitted: base.Add(2 * time.Millisecond), Finished: base.Add(90 * time.Millisecond)},
		{ID: 15, ParentID: 12, Type: "child", State: RolledBack, Submitted: base.Add(50 * time.Millisecond), Finished: base.Add(60 * time.Millisecond), Error: "boom"},
		{ID: 16, ParentID: 12, Type: "child", State: Failed, Submitted: base.Add(50 * time.Millisecond), Error: long},
	}
	r := record{id: 10, root: 10, typeName: "root", state: Success, submitted: unixNano(base),
		finishedAt: unixNano(base.Add(time.Second)), updated: unixNano(base.Add(time.Second)),
		children: []uint64{11, 12}, summaries: packChildSummaries(10, base, list, 3)}
	var back record
	if err := back.unmarshal(r.marshal()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.summaries, r.summaries) || !reflect.DeepEqual(back.children, r.children) {
		t.Fatalf("summaries or children changed in a round trip")
	}
	got, omitted, err := unpackChildSummaries(back.summaries, 10, base)
	if err != nil {
		t.Fatal(err)
	}
	if omitted != 3 {
		t.Errorf("omitted %d, want 3", omitted)
	}
	want := append([]ChildSummary(nil), list...)
	for i := range want {
		ms := func(t time.Time) time.Time {
			if t.IsZero() {
				return t
			}
			return base.Add(t.Sub(base).Truncate(time.Millisecond))
		}
		want[i].Submitted, want[i].Finished = ms(want[i].Submitted), ms(want[i].Finished)
	}
	want[3].Error = capError(long)
	if len(want[3].Error) > maxSummaryError || !strings.HasSuffix(want[3].Error, "é…") {
		t.Fatalf("capped error %q (%d bytes)", want[3].Error, len(want[3].Error))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	if lo, hi, ok := ChildSpan(r.marshal()); !ok || lo != 11 || hi != 16 {
		t.Errorf("ChildSpan = %d, %d, %v; want 11, 16, true", lo, hi, ok)
	}
	infos, _, kept, err := ChildSummaryInfos(r.marshal())
	if err != nil || !kept || len(infos) != 4 {
		t.Fatalf("ChildSummaryInfos: %d infos, kept %v, %v", len(infos), kept, err)
	}
	if p := infos[1]; p.ID != 12 || p.RootID != 10 || !reflect.DeepEqual(p.Children, []uint64{15, 16}) || !p.SummaryOnly {
		t.Errorf("summarised parent %+v: want children 15 and 16, root 10", p)
	}
	// A live record never carries them: only a finished root writes them.
	live := r
	live.state = Waiting
	var lb record
	if err := lb.unmarshal(live.marshal()); err != nil || lb.summaries != nil {
		t.Errorf("a live record's summaries: %v, %v", lb.summaries, err)
	}
}

// TestChildSummariesOfAnOlderRecord: a finished root written before
// summaries were kept (no field 113) lists its children but keeps no
// summary of them: they are named as such, not made up.
func TestChildSummariesOfAnOlderRecord(t *testing.T) {
	r := record{id: 10, root: 10, typeName: "steps", typeVersion: 1, state: Success, submitted: 1e15, finishedAt: 1e15 + 5e6,
		children: []uint64{11, 12}}
	data := r.marshal()
	if _, _, kept, err := ChildSummaryInfos(data); kept || err != nil {
		t.Fatalf("an older record keeps summaries? %v %v", kept, err)
	}
	if _, found, listed, err := ChildSummaryInfo(data, 12); found || !listed || err != nil {
		t.Fatalf("child 12: found %v listed %v %v; want listed without a summary", found, listed, err)
	}

	// Loaded by an executor: Get of a child says why it has nothing.
	mem := store.NewMemStore()
	if err := mem.Insert(store.Proc{ID: 10, Data: data}, nil); err != nil {
		t.Fatal(err)
	}
	h := startExecutor(t, mem, newDomain(), nil)
	_, err := h.x.Get(12)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no summary of it was kept") {
		t.Fatalf("Get of an older root's child: %v; want NotFound saying no summary was kept", err)
	}
	if _, err := h.x.Get(13); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "summary") {
		t.Fatalf("Get of an id no root names: %v", err)
	}
}

// transits is the summaries of n region transitions that succeeded under
// root 1 (ids 2 on), child i submitted and finished when times says.
func transits(n int, times func(i int) (submitted, finished time.Time)) []ChildSummary {
	list := make([]ChildSummary, n)
	for i := range list {
		sub, fin := times(i)
		list[i] = ChildSummary{ID: uint64(2 + i), ParentID: 1, Type: "TransitRegionState", State: Success,
			Submitted: sub, Finished: fin}
	}
	return list
}

// TestChildSummariesBounded: a tree too big for every summary keeps the
// first ones within maxSummaryBytes and counts the rest.
func TestChildSummariesBounded(t *testing.T) {
	base := time.Unix(1e6, 0)
	const n = 300_000
	list := transits(n, func(i int) (time.Time, time.Time) {
		return base.Add(time.Duration(i) * time.Millisecond), base.Add(time.Duration(i+300) * time.Millisecond)
	})
	msg := packChildSummaries(1, base, list, 0)
	if len(msg) > maxSummaryBytes+64 {
		t.Fatalf("%d bytes of summaries, bound %d", len(msg), maxSummaryBytes)
	}
	got, omitted, err := unpackChildSummaries(msg, 1, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(got)+omitted != n || omitted == 0 || got[0].ID != 2 || got[len(got)-1].ID != uint64(1+len(got)) {
		t.Fatalf("kept %d (first %d), omitted %d of %d", len(got), got[0].ID, omitted, n)
	}
	t.Logf("%d of %d children summarised in %d bytes (%.1f bytes each)", len(got), n, len(msg), float64(len(msg))/float64(len(got)))
}

// TestForgottenChildrenSummarised: the children a parent forgets as they
// succeed (ForgetsChildren) are summarised when forgotten; the one that
// failed and was kept until the root ended is summarised with the root's
// finish. Get of each answers from its summary, also once an Ack wrote
// the root's record again, and keeps answering after a restart (the index is rebuilt by the load) until the root is
// evicted.
func TestForgottenChildrenSummarised(t *testing.T) {
	mem := store.NewMemStore()
	mc := clock.NewManual(time.Unix(1e6, 0))
	mod := func(c *Config) {
		c.Registry, c.Clock, c.EvictInterval, c.ResultTTL = forgetRegistry(t), mc, 24*time.Hour, time.Minute
	}
	h := startExecutor(t, mem, newDomain(), mod)
	const kids = 200
	p := &fgParent{Name: uniq("P"), Kids: kids, Steps: 2, FailKid: 7, Forget: true}
	id := h.submit(p, SubmitOptions{Owner: "ops"})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("parent ended %s (%s)", info.State, info.Error)
	}
	ids := childIDs(t, h.x, id)
	check := func(x *Executor) {
		t.Helper()
		for i, c := range ids {
			info, err := x.Get(c)
			if err != nil {
				t.Fatalf("child %d (%d): %v", i, c, err)
			}
			wantState := Success
			if i == p.FailKid {
				wantState = RolledBack
			}
			if !info.SummaryOnly || info.ID != c || info.ParentID != id || info.RootID != id || info.Type != "fgchild" ||
				info.State != wantState || info.Owner != "ops" || info.Submitted.IsZero() || info.Finished.IsZero() {
				t.Fatalf("child %d: %+v; want the summary of a %s fgchild of %d", i, info, wantState, id)
			}
			if (info.Error != "") != (i == p.FailKid) {
				t.Fatalf("child %d: error %q", i, info.Error)
			}
		}
	}
	check(h.x)
	if mem.Len() != 1 {
		t.Fatalf("%d records stored, want the root's alone", mem.Len())
	}
	// An Ack writes the root's record again: with its summaries.
	if err := h.x.Ack(id); err != nil {
		t.Fatal(err)
	}
	check(h.x)

	_ = h.x.Stop(t.Context())
	h2 := startExecutor(t, mem, newDomain(), mod)
	check(h2.x)

	mc.Advance(2 * time.Minute)
	if n := h2.x.EvictExpired(); n != 1 {
		t.Fatalf("evicted %d, want the root", n)
	}
	if _, err := h2.x.Get(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a child after its root's eviction: %v; want NotFound", err)
	}
	if n := len(h2.x.children.spans); n != 0 {
		t.Fatalf("%d child spans left after the eviction", n)
	}
}

// TestGrandchildrenSummarised: an ordinary root keeps its tree until it
// ends; its finish summarises every descendant, a grandchild with its own
// parent's id.
func TestGrandchildrenSummarised(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
	p := fgParent{Name: uniq("P"), Kids: 3, Steps: 1, FailKid: -1}
	id := h.submit(&fgRoot{Parent: p}, SubmitOptions{})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("ended %s (%s)", info.State, info.Error)
	}
	kids := childIDs(t, h.x, id)
	if len(kids) != 1 {
		t.Fatalf("root's children %v", kids)
	}
	parent, err := h.x.Get(kids[0])
	if err != nil || parent.Type != "fgparent" || parent.ParentID != id || len(parent.Children) != 3 {
		t.Fatalf("the summarised parent: %+v, %v", parent, err)
	}
	for _, c := range parent.Children {
		gc, err := h.x.Get(c)
		if err != nil || gc.ParentID != parent.ID || gc.RootID != id || gc.Type != "fgchild" || gc.State != Success {
			t.Fatalf("grandchild %d: %+v, %v", c, gc, err)
		}
	}
}

// TestChildIndexOverlappingTrees: the spans of trees that ran at once
// overlap; a lookup finds each child in its own root's summaries.
func TestChildIndexOverlappingTrees(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
	var roots []uint64
	for i := range 4 {
		roots = append(roots, h.submit(&fgParent{Name: uniq(fmt.Sprint("P", i)), Kids: 30, Steps: 2, FailKid: -1, Forget: true}, SubmitOptions{}))
	}
	for _, id := range roots {
		if info := h.wait(id); info.State != Success {
			t.Fatalf("%d ended %s", id, info.State)
		}
	}
	for _, id := range roots {
		for _, c := range childIDs(t, h.x, id) {
			if info, err := h.x.Get(c); err != nil || info.RootID != id {
				t.Fatalf("child %d of %d: %+v, %v", c, id, info, err)
			}
		}
	}
}

// BenchmarkChildSummaryBytes reports the bytes a child that succeeded
// costs its root's record (summary-B/child), for a table create's
// 10,000 region transitions submitted over a second and taking 0.2-2 s.
func BenchmarkChildSummaryBytes(b *testing.B) {
	base := time.Unix(1e6, 0)
	const n = 10_000
	list := transits(n, func(i int) (time.Time, time.Time) {
		sub := base.Add(time.Duration(i/10) * time.Millisecond)
		return sub, sub.Add(time.Duration(200+i%1800) * time.Millisecond)
	})
	var msg []byte
	for i := 0; i < b.N; i++ {
		msg = packChildSummaries(1, base, list, 0)
	}
	// The field's tag and length, as the record carries it.
	rec := protowire.AppendBytes(protowire.AppendTag(nil, fChildSummaries, protowire.BytesType), msg)
	b.ReportMetric(float64(len(rec))/n, "summary-B/child")
	b.ReportMetric(float64(len(rec)), "summary-B/root")
}

// TestChildSummaryLookupAllocatesLittle: finding one child among a big
// tree's summaries (the console reads 60 of a crash recovery's 100,000,
// one call each) keeps none of the others, and listing a page of them
// builds the Infos of that page alone.
func TestChildSummaryLookupAllocatesLittle(t *testing.T) {
	base := time.Unix(1e6, 0)
	const n = 100_000
	list := transits(n, func(int) (time.Time, time.Time) { return base, base.Add(time.Second) })
	r := record{id: 1, root: 1, typeName: "ServerCrash", state: Success, submitted: unixNano(base),
		finishedAt: unixNano(base.Add(time.Minute)), summaries: packChildSummaries(1, base, list, 0)}
	data := r.marshal()
	if allocs := testing.AllocsPerRun(3, func() {
		if _, found, _, err := ChildSummaryInfo(data, n/2); !found || err != nil {
			t.Fatalf("child %d: %v %v", n/2, found, err)
		}
	}); allocs > 50 {
		t.Errorf("a lookup among %d summaries made %.0f allocations", n, allocs)
	}
	infos, _, _, err := ChildSummaryInfosIn(data, 500, 600)
	if err != nil || len(infos) != 100 || infos[0].ID != 501 || infos[99].ID != 600 {
		t.Fatalf("a page of summaries: %d (%v)", len(infos), err)
	}
}
