package procedure

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/store"
)

// noReader hides a store's Reader, as the WAL has none: the executor then
// keeps each finished root's last record itself.
type noReader struct{ store.Store }

// finishedStoreKinds are the two ways the executor gets a finished root's
// record back: from the store's Reader, or from the copy it keeps itself.
var finishedStoreKinds = []struct {
	name  string
	store func() store.Store
}{
	{"reader", func() store.Store { return store.NewMemStore() }},
	{"no reader", func() store.Store { return noReader{store.NewMemStore()} }},
}

// submitDoneAndRolled submits the two roots the retirement tests finish:
// alice's, with two children, to succeed, and bob's state machine, to
// fail in its third state and roll back.
func submitDoneAndRolled(h *harness, doneNonce, rolledNonce string) (done, rolled uint64) {
	h.t.Helper()
	p := newSteps("p", 3)
	p.SpawnAt, p.Children, p.ChildSteps = 1, 2, 1
	f := newSM("f", 3)
	f.FailAt = 2
	return h.submit(p, SubmitOptions{Owner: "alice", Nonce: doneNonce}),
		h.submit(f, SubmitOptions{Owner: "bob", Nonce: rolledNonce})
}

// A finished root leaves the executor's table for its finishedRoot, and
// whatever the API says of it is as before: its record has the rest.
func TestFinishedRootsAreRetired(t *testing.T) {
	for _, tc := range finishedStoreKinds {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.store()
			mc := clock.NewManual(time.Unix(1e6, 0))
			h := startExecutor(t, st, newDomain(), func(c *Config) {
				c.Clock, c.Node, c.EvictInterval = mc, "m1", 24*time.Hour
			})
			done, rolled := submitDoneAndRolled(h, "n1", "n2")
			for _, id := range []uint64{done, rolled} {
				if info := h.wait(id); !info.State.Terminal() {
					t.Fatalf("%d ended %s", id, info.State)
				}
			}
			live := h.submit(&funcProc{ID: "never"}, SubmitOptions{Owner: "alice"}) // fails at once: "no func"
			h.wait(live)

			h.x.mu.Lock()
			for _, id := range []uint64{done, rolled, live} {
				if h.x.procs[id] != nil || h.x.roots[id] != nil {
					t.Errorf("finished root %d still has its live entry", id)
				}
				if _, ok := h.x.finished.get(id); !ok {
					t.Errorf("finished root %d not kept", id)
				}
			}
			if len(h.x.nonces) != 0 {
				t.Errorf("%d live nonce entries left, want their finished roots' hashes only", len(h.x.nonces))
			}
			h.x.mu.Unlock()

			info, err := h.x.Get(done)
			if err != nil {
				t.Fatal(err)
			}
			if info.State != Success || info.Owner != "alice" || info.Nonce != "n1" || info.Type != "steps" ||
				len(info.Children) != 2 || len(info.Runs) != 1 || info.Runs[0].Node != "m1" || info.Finished.IsZero() ||
				len(info.History) < 4 || info.History[len(info.History)-1].State != Success || info.Data != nil {
				t.Fatalf("finished root's Info %+v", info)
			}
			if info, _ := h.x.Get(rolled); info.State != RolledBack || info.Error == "" || len(info.History) == 0 ||
				!slices.ContainsFunc(info.History, func(tr Transition) bool { return tr.RollingBack }) {
				t.Fatalf("rolled back root's Info %+v", info)
			}
			if w, err := h.x.Why(done); err != nil || w.Reason != "finished" || w.ID != done {
				t.Fatalf("Why = %+v, %v", w, err)
			}
			for name, err := range map[string]error{
				"abort":  h.x.Abort(done),
				"pause":  h.x.Pause(done),
				"bypass": h.x.Bypass(done, BypassOptions{}),
			} {
				if !errors.Is(err, ErrNotAllowed) {
					t.Errorf("%s of a finished root: %v, want ErrNotAllowed", name, err)
				}
			}
			if err := h.x.Resume(done); err != nil {
				t.Errorf("resume of a finished root: %v", err)
			}

			// Lists filter and page them with the live ones, by id.
			if got := ids(h.x.List(Filter{Owner: "alice"})); !slices.Equal(got, []uint64{done, live}) {
				t.Errorf("List(owner alice) = %v, want %v", got, []uint64{done, live})
			}
			if got := ids(h.x.List(Filter{States: []State{RolledBack}, Type: "sm"})); !slices.Equal(got, []uint64{rolled}) {
				t.Errorf("List(rolled back sm) = %v, want %v", got, []uint64{rolled})
			}
			if got := ids(h.x.List(Filter{RootsOnly: true, AfterID: done, Limit: 1})); !slices.Equal(got, []uint64{rolled}) {
				t.Errorf("List(after %d, limit 1) = %v, want %v", done, got, []uint64{rolled})
			}
			sub := info.Submitted
			if got := ids(h.x.List(Filter{SubmittedAfter: sub.Add(time.Second)})); len(got) != 0 {
				t.Errorf("List(submitted later) = %v, want none", got)
			}

			// Its nonce answers with it, a restart or not.
			if id, ok := h.x.LookupNonce("alice", "n1"); !ok || id != done {
				t.Errorf("LookupNonce = %d %v, want %d", id, ok, done)
			}
			if id, _ := h.x.Submit(newSteps("again", 1), SubmitOptions{Owner: "alice", Nonce: "n1"}); id != done {
				t.Errorf("resubmission got %d, want %d", id, done)
			}
			if _, ok := h.x.LookupNonce("bob", "n1"); ok {
				t.Error("a nonce of another owner answered")
			}

			// An Ack is written into its record, counted as a write.
			if err := h.x.Ack(done); err != nil {
				t.Fatal(err)
			}
			acked, _ := h.x.Get(done)
			if acked.Acked.IsZero() || acked.Runs[0].Last != info.Runs[0].Last+1 {
				t.Fatalf("after Ack: acked %v, runs %+v (before %+v)", acked.Acked, acked.Runs, info.Runs)
			}
			if err := h.x.Ack(done); err != nil {
				t.Fatal(err)
			}
			if again, _ := h.x.Get(done); again.Runs[0].Last != acked.Runs[0].Last {
				t.Error("a second Ack wrote again")
			}
			if err := h.x.Ack(live + 100); !errors.Is(err, ErrNotFound) {
				t.Errorf("ack of an unknown id: %v", err)
			}

			// A restart keeps them as they were.
			if err := h.x.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			h2 := startExecutor(t, st, newDomain(), func(c *Config) { c.Clock, c.Node, c.EvictInterval = mc, "m2", 24*time.Hour })
			back, err := h2.x.Get(done)
			if err != nil || !reflect.DeepEqual(back, acked) {
				t.Fatalf("after restart:\n%+v\nwant\n%+v (%v)", back, acked, err)
			}
			if id, ok := h2.x.LookupNonce("bob", "n2"); !ok || id != rolled {
				t.Errorf("after restart: LookupNonce = %d %v, want %d", id, ok, rolled)
			}

			// Eviction takes them and their nonces: acked first.
			mc.Advance(6 * time.Minute)
			if n := h2.x.EvictExpired(); n != 1 {
				t.Fatalf("evicted %d, want the acked one", n)
			}
			if _, err := h2.x.Get(done); !errors.Is(err, ErrNotFound) {
				t.Fatalf("evicted root: %v", err)
			}
			if _, ok := h2.x.LookupNonce("alice", "n1"); ok {
				t.Error("an evicted root's nonce still answers")
			}
			mc.Advance(10 * time.Minute)
			if n := h2.x.EvictExpired(); n != 2 {
				t.Fatalf("evicted %d, want the other two", n)
			}
			h2.x.mu.Lock()
			defer h2.x.mu.Unlock()
			if h2.x.finished.len() != 0 || h2.x.fin.nonces.len() != 0 || len(h2.x.fin.recs) != 0 {
				t.Errorf("after eviction: %d finished, %d nonces, %d records kept", h2.x.finished.len(), h2.x.fin.nonces.len(), len(h2.x.fin.recs))
			}
		})
	}
}

func ids(infos []Info) []uint64 {
	var out []uint64
	for _, i := range infos {
		out = append(out, i.ID)
	}
	return out
}

// Nonce keys of one hash are told apart by the records, whether their
// refs were just added or merged into the sorted index, and an evicted
// one goes from either.
func TestFinishedNonceCollision(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	var ids []uint64
	for _, n := range []string{"a", "b", "c"} {
		id := h.submit(newSteps(n, 1), SubmitOptions{Nonce: n})
		h.wait(id)
		ids = append(ids, id)
	}
	find := func(n string) uint64 {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		id, _ := h.x.finishedByNonceLocked(nonceKey("", n))
		return id
	}
	check := func(when string) {
		t.Helper()
		for i, n := range []string{"a", "b", "c"} {
			if got := find(n); got != ids[i] {
				t.Errorf("%s: nonce %s finds %d, want %d", when, n, got, ids[i])
			}
		}
	}
	// As if all three keys had a's hash, one ref of them under b's too.
	h.x.mu.Lock()
	ha, hb := h.x.fin.nonceHash(nonceKey("", "a")), h.x.fin.nonceHash(nonceKey("", "b"))
	h.x.fin.nonces.add(ha, ids[1])
	h.x.fin.nonces.add(ha, ids[2])
	h.x.fin.nonces.add(hb, ids[2])
	h.x.mu.Unlock()
	check("added")
	h.x.mu.Lock()
	h.x.fin.nonces.merge()
	h.x.mu.Unlock()
	check("merged")
	h.x.mu.Lock()
	h.x.fin.nonces.remove(ha, ids[0])
	h.x.fin.nonces.add(ha, 999) // no such root: its record is not found
	h.x.mu.Unlock()
	if got := find("a"); got != 0 {
		t.Errorf("a removed: finds %d", got)
	}
	h.x.mu.Lock()
	h.x.fin.nonces.merge()
	n := h.x.fin.nonces.len()
	h.x.mu.Unlock()
	if got := find("b"); got != ids[1] || n != 6 {
		t.Errorf("after a second merge: b finds %d, %d refs; want %d and 6", got, n, ids[1])
	}
}

// A finished root's compact record reads back as it was written, and the
// record an older binary wrote for one still reads.
func TestFinishedRecordFormats(t *testing.T) {
	sub := time.Unix(1e9, 0)
	at := func(ms int) time.Time { return sub.Add(time.Duration(ms) * time.Millisecond) }
	hist := []Transition{
		{State: Runnable, Step: 0, Node: "m1", At: at(0), Until: at(0), Writes: 1},
		{State: Runnable, Step: 1, Depth: 1, Node: "m1", At: at(5), Until: at(9), Writes: 3, Attempt: 2},
		{State: Waiting, Step: 2, Depth: 2, Node: "m2", At: at(70000), Until: at(70000), Writes: 1},
		{State: Failed, Step: 2, Depth: 3, Node: "m2", At: at(70010), Until: at(70010), Writes: 1},
		{State: Runnable, Step: 1, Depth: 1, Node: "m2", At: at(70020), Until: at(70030), Writes: 2, RollingBack: true},
		{State: RolledBack, Step: 1, Depth: 0, Node: "m2", At: at(70040), Until: at(70040), Writes: 1, RollingBack: true},
	}
	runs := []Run{{Node: "m1", First: 1, Last: 4, At: at(0), Until: at(9)}, {Node: "m2", First: 5, Last: 9, At: at(70000), Until: at(70040)}}
	r := record{id: 300, root: 300, typeName: "sm", typeVersion: 2, state: RolledBack, owner: "o", nonce: "n",
		submitted: sub.UnixNano(), updated: at(70040).UnixNano() + 500, finishedAt: at(70040).UnixNano(),
		errMsg: "boom", result: []byte("r"), data: []byte(`{}`), sm: true, smNext: 1,
		runs: runs, history: hist, children: []uint64{301, 305, 302}}
	var back record
	if err := back.unmarshal(r.marshal()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.history, hist) || !reflect.DeepEqual(back.runs, runs) ||
		!slices.Equal(back.children, r.children) || back.updated != r.finishedAt || back.finishedAt != r.finishedAt {
		t.Fatalf("read back:\nhistory %+v\nruns %+v\nchildren %v updated %d\nwant\n%+v\n%+v\n%v %d",
			back.history, back.runs, back.children, back.updated, hist, runs, r.children, r.finishedAt)
	}
	// An Updated well after the finish is kept as such.
	r.updated = at(80000).UnixNano()
	if err := back.unmarshal(r.marshal()); err != nil || back.updated != r.updated {
		t.Fatalf("updated %d, want %d (%v)", back.updated, r.updated, err)
	}

	// Before this format: absolute times, one fHistory field per
	// transition, Updated always written (as a live record still is).
	old := r
	old.state = Runnable
	h := loadedHistory(hist, sub)
	old.historyEnc, old.historyLast = h.encoded()
	b := old.marshal()
	b = protowire.AppendTag(b, fState, protowire.VarintType) // the last value of a field wins
	b = protowire.AppendVarint(b, uint64(RolledBack))
	if err := back.unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if back.state != RolledBack || !reflect.DeepEqual(back.history, hist) || !reflect.DeepEqual(back.runs, runs) ||
		back.updated != r.updated || len(back.children) != 0 {
		t.Fatalf("old format read back: %+v", back)
	}
	// And the compact one is smaller.
	if n, o := len(r.marshal()), len(b); n >= o {
		t.Errorf("compact record %d bytes, older one %d", n, o)
	}
}

// rootEnds keeps each root's first terminal Info as a listener saw it:
// what its live entry said when it finished.
type rootEnds struct {
	mu    sync.Mutex
	first map[uint64]Info
}

func recordRootEnds(h *harness) *rootEnds {
	r := &rootEnds{first: map[uint64]Info{}}
	h.x.AddListener(func(info Info) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, seen := r.first[info.ID]; !seen && info.State.Terminal() && info.ParentID == 0 {
			r.first[info.ID] = info
		}
	})
	return r
}

// checkAsLive checks that Get of each root (retired by now, or answered by
// a restarted executor: what says which) answers as its live entry did
// when it finished, less its Data.
func (r *rootEnds) checkAsLive(t *testing.T, h *harness, what string, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		got, err := h.x.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		live := r.first[id]
		r.mu.Unlock()
		live.Data = nil
		if !reflect.DeepEqual(got, live) {
			t.Errorf("%s: root %d:\n%+v\nlive entry as it finished:\n%+v", what, id, got, live)
		}
	}
}

// A retired root, read back from its compact record, answers Get with
// the fields its live entry had when it finished (but Data, which no
// snapshot carries), and after a restart a resubmission of its nonce gets
// its id: also once its nonce's ref has been merged into the sorted index.
func TestFinishedRetiredAnswersAsLive(t *testing.T) {
	st := store.NewMemStore()
	mc := clock.NewManual(time.Unix(1e6, 123_456_789))
	h := startExecutor(t, st, newDomain(), func(c *Config) { c.Clock, c.Node, c.EvictInterval = mc, "m1", 24*time.Hour })
	ends := recordRootEnds(h)
	done, rolled := submitDoneAndRolled(h, "n-done", "n-rolled")
	h.wait(done)
	h.wait(rolled)
	// Enough more roots that the refs are merged (mergeFloor) before the
	// restart, and the restart's index holds them all.
	var more []uint64
	for i := 0; i < mergeFloor+10; i++ {
		id := h.submit(newSteps("s", 1), SubmitOptions{Owner: "carol", Nonce: fmt.Sprintf("n-%d", i)})
		more = append(more, id)
	}
	for _, id := range more {
		h.wait(id)
	}
	h.x.mu.Lock()
	sorted := len(h.x.fin.nonces.sorted)
	h.x.mu.Unlock()
	if sorted == 0 {
		t.Fatal("no nonce ref was merged into the sorted index")
	}
	ends.checkAsLive(t, h, "retired", done, rolled)

	if err := h.x.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := startExecutor(t, st, newDomain(), func(c *Config) { c.Clock, c.Node, c.EvictInterval = mc, "m2", 24*time.Hour })
	for nonce, want := range map[string]uint64{"n-done": done, "n-rolled": rolled} {
		owner := map[string]string{"n-done": "alice", "n-rolled": "bob"}[nonce]
		if id, err := h2.x.Submit(newSteps("again", 1), SubmitOptions{Owner: owner, Nonce: nonce}); err != nil || id != want {
			t.Errorf("after restart: resubmission of %s got %d (%v), want %d", nonce, id, err, want)
		}
	}
	for i, want := range more {
		if id, ok := h2.x.LookupNonce("carol", fmt.Sprintf("n-%d", i)); !ok || id != want {
			t.Fatalf("after restart: nonce n-%d finds %d %v, want %d", i, id, ok, want)
		}
	}
	if id, ok := h2.x.LookupNonce("alice", "n-rolled"); ok {
		t.Errorf("another owner's nonce answered with %d", id)
	}
	ends.checkAsLive(t, h2, "after restart", done)
}

// A finished root's row keeps its expiry in whole seconds, rounded up: it
// is never evicted before its rule says, and at most a second after.
func TestFinishedExpiryNeverEarly(t *testing.T) {
	mc := clock.NewManual(time.Unix(1e6, 300_000_001))
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Clock, c.EvictInterval, c.ResultTTL, c.AckedResultTTL = mc, 24*time.Hour, 20*time.Second, 5*time.Second
	})
	id := h.submit(newSteps("s", 1), SubmitOptions{})
	info := h.wait(id)
	mc.Advance(info.Finished.Add(20*time.Second - time.Nanosecond).Sub(mc.Now()))
	if n := h.x.EvictExpired(); n != 0 {
		t.Fatalf("evicted %d a nanosecond before its ResultTTL", n)
	}
	mc.Advance(time.Second)
	if n := h.x.EvictExpired(); n != 1 {
		t.Fatalf("evicted %d a second after its ResultTTL, want 1", n)
	}

	for ns, want := range map[int64]uint32{
		math.MinInt64: 0, -1: 0, 0: 0, 1: 1, int64(time.Second): 1, int64(time.Second) + 1: 2,
		math.MaxInt64: math.MaxUint32,
	} {
		if got := expirySeconds(ns); got != want {
			t.Errorf("expirySeconds(%d) = %d, want %d", ns, got, want)
		}
	}
}

// Refs keep 32 bits of the hash: hashes alike in those are told apart by
// the records (here, is); ids past 2^32 are kept whole, and found,
// removed and counted as the others.
func TestNonceIndexShortRefs(t *testing.T) {
	n := newNonceIndex()
	const lo = 0xabcdef
	big := uint64(math.MaxUint32) + 7
	refs := map[uint64]uint64{ // id -> hash
		1:       1<<40 | lo,
		2:       2<<40 | lo, // the same low 32 bits as 1's
		big:     3<<40 | lo,
		big + 1: 3<<40 | lo,
	}
	for i := uint64(10); i < 10+3*mergeFloor; i++ { // enough to be merged
		refs[i] = i * 0x9e3779b97f4a7c15
	}
	for id, h := range refs {
		n.add(h, id)
	}
	check := func(when string) {
		t.Helper()
		for id, h := range refs {
			if got, ok := n.find(h, func(x uint64) bool { return x == id }); !ok || got != id {
				t.Fatalf("%s: find(%x) for %d = %d %v", when, h, id, got, ok)
			}
		}
		if n.len() != len(refs) {
			t.Fatalf("%s: %d refs, want %d", when, n.len(), len(refs))
		}
	}
	check("added")
	if len(n.sorted) == 0 {
		t.Fatal("nothing merged")
	}
	n.merge()
	check("merged")
	if len(n.wide) == 0 {
		t.Fatal("ids 1 and 2^32+7 kept in one window")
	}
	for _, id := range []uint64{2, big, 10} {
		n.remove(refs[id], id)
		if got, ok := n.find(refs[id], func(x uint64) bool { return x == id }); ok {
			t.Errorf("removed %d still found (%d)", id, got)
		}
		delete(refs, id)
	}
	check("removed")
	n.merge()
	check("removed and merged")

	// Once the low ids are evicted, a merge moves the window up to the
	// high ones, and an id below it is kept whole.
	for id, h := range refs {
		if id < big {
			n.remove(h, id)
			delete(refs, id)
		}
	}
	for id := big + 2; id < big+2+mergeFloor; id++ {
		refs[id] = id * 0x9e3779b97f4a7c15
		n.add(refs[id], id)
	}
	n.merge()
	check("window moved")
	if len(n.wide) != 0 || n.base != big+1 {
		t.Fatalf("window at %d, %d hashes kept whole; want at %d, none", n.base, len(n.wide), big+1)
	}
	refs[5] = 1<<40 | lo
	n.add(refs[5], 5)
	n.merge()
	check("below the window")
	if len(n.wide) != 1 {
		t.Errorf("%d hashes kept whole, want id 5's", len(n.wide))
	}
}

// Nonces of finished roots whose ids cross 2^32 dedupe to their ids
// while kept, stop deduping once evicted (a resubmission then gets a new
// id, which dedupes in turn), as the eviction moves the refs' base, and
// after a restart.
func TestFinishedNoncesAcross4GIDs(t *testing.T) {
	for _, tc := range finishedStoreKinds {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.store()
			mc := clock.NewManual(time.Unix(1e6, 0))
			cfg := func(c *Config) {
				c.Clock, c.EvictInterval, c.ResultTTL, c.AckedResultTTL = mc, 24*time.Hour, time.Minute, time.Minute
			}
			h := startExecutor(t, st, newDomain(), cfg)
			h.x.mu.Lock()
			h.x.nextID = 1<<32 - 3
			h.x.mu.Unlock()
			want := map[string]uint64{}
			submit := func(h *harness, prefix string, k int) {
				t.Helper()
				var ids []uint64
				for i := range k {
					n := fmt.Sprintf("%s-%d", prefix, i)
					id := h.submit(newSteps(n, 1), SubmitOptions{Owner: "o", Nonce: n})
					want[n] = id
					ids = append(ids, id)
				}
				for _, id := range ids {
					h.wait(id)
				}
			}
			check := func(h *harness, when string) {
				t.Helper()
				for n, id := range want {
					if got, ok := h.x.LookupNonce("o", n); !ok || got != id {
						t.Fatalf("%s: nonce %s finds %d %v, want %d", when, n, got, ok, id)
					}
				}
			}
			submit(h, "a", 8) // ids 2^32-3 .. 2^32+4: both sides of the window
			check(h, "first")
			mc.Advance(30 * time.Second)
			submit(h, "b", mergeFloor+50)
			check(h, "second")
			mc.Advance(31 * time.Second) // the a's expire
			if n := h.x.EvictExpired(); n != 8 {
				t.Fatalf("evicted %d, want the 8 a's", n)
			}
			var maxID uint64
			for n, id := range want {
				maxID = max(maxID, id)
				if n[0] == 'a' {
					delete(want, n)
					if got, ok := h.x.LookupNonce("o", n); ok {
						t.Fatalf("evicted nonce %s finds %d", n, got)
					}
				}
			}
			check(h, "after the eviction")
			submit(h, "a", 8) // the a's again: new ids
			for i := range 8 {
				if id := want[fmt.Sprintf("a-%d", i)]; id <= maxID {
					t.Fatalf("resubmitted a-%d got %d, not a new id (max %d)", i, id, maxID)
				}
			}
			check(h, "resubmitted")
			if err := h.x.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			h2 := startExecutor(t, st, newDomain(), cfg)
			check(h2, "after restart")
			for n, id := range want {
				if got, err := h2.x.Submit(newSteps("again", 1), SubmitOptions{Owner: "o", Nonce: n}); err != nil || got != id {
					t.Fatalf("after restart: resubmission of %s got %d (%v), want %d", n, got, err, id)
				}
			}
		})
	}
}

// Resubmissions racing the eviction of their nonces' roots get either
// the evicted root's id (it was still kept when they asked) or one new
// id per nonce: never two new procedures for one nonce, nor an error.
func TestFinishedNonceResubmitRacesEviction(t *testing.T) {
	for _, tc := range finishedStoreKinds {
		t.Run(tc.name, func(t *testing.T) {
			mc := clock.NewManual(time.Unix(1e6, 0))
			h := startExecutor(t, tc.store(), newDomain(), func(c *Config) {
				c.Clock, c.EvictInterval, c.ResultTTL = mc, 24*time.Hour, time.Minute
			})
			const k = 200
			old := map[string]uint64{}
			for i := range k {
				n := fmt.Sprintf("n-%d", i)
				old[n] = h.submit(newSteps(n, 1), SubmitOptions{Nonce: n})
			}
			for _, id := range old {
				h.wait(id)
			}
			mc.Advance(2 * time.Minute)
			var mu sync.Mutex
			got := map[string][]uint64{}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.x.EvictExpired()
			}()
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range k {
						n := fmt.Sprintf("n-%d", (i+g*k/4)%k)
						id, err := h.x.Submit(newSteps(n, 1), SubmitOptions{Nonce: n})
						if err != nil {
							t.Errorf("resubmit %s: %v", n, err)
							return
						}
						mu.Lock()
						got[n] = append(got[n], id)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for n, ids := range got {
				var fresh uint64
				for _, id := range ids {
					if id == old[n] {
						continue
					}
					if fresh != 0 && id != fresh {
						t.Errorf("nonce %s: two new procedures %d and %d", n, fresh, id)
					}
					fresh = id
				}
				if fresh != 0 {
					h.wait(fresh)
				}
			}
		})
	}
}

// The owner is part of a nonce's key: one owner's nonce never answers
// another's submission, also when an owner holds the byte that joins
// owner and nonce in the key.
func TestNonceKeyOwnerWithSeparator(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	first, err := h.x.Submit(newSteps("first", 1), SubmitOptions{Owner: "a\x00b", Nonce: "c"})
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("owner with a NUL: %v, want ErrInvalid or a submission", err)
		}
		return
	}
	h.wait(first) // retired: the finished index answers
	second, err := h.x.Submit(newSteps("second", 1), SubmitOptions{Owner: "a", Nonce: "b\x00c"})
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Errorf("owner %q, nonce %q answered with owner %q's procedure %d", "a", "b\x00c", "a\x00b", first)
	}
}

// A root that retries until done answers Get, once retired, as its live
// entry did when it finished.
func TestFinishedUntilDoneRetiredAnswersAsLive(t *testing.T) {
	mc := clock.NewManual(time.Unix(1e6, 0))
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Registry, c.Clock, c.EvictInterval = untilDoneRegistry(t), mc, 24*time.Hour
	})
	var mu sync.Mutex
	var first *Info
	h.x.AddListener(func(info Info) {
		mu.Lock()
		defer mu.Unlock()
		if info.State.Terminal() && info.ParentID == 0 && first == nil {
			first = &info
		}
	})
	id := h.submit(&udSM{Name: "U"}, SubmitOptions{Nonce: "u"})
	waited := h.wait(id)
	got, err := h.x.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	live := *first
	mu.Unlock()
	live.Data = nil
	if !reflect.DeepEqual(got, live) {
		t.Errorf("retired root:\n%+v\nlive entry as it finished:\n%+v", got, live)
	}
	if got.UntilDone != waited.UntilDone {
		t.Errorf("Get says UntilDone %v, Wait said %v", got.UntilDone, waited.UntilDone)
	}
}

// Roots that finish in other ways (a result, a coded failure, an abort,
// a timeout) answer Get, once retired, as their live entries did when
// they finished.
func TestFinishedRetiredAnswersAsLiveEndings(t *testing.T) {
	mc := clock.NewManual(time.Unix(1e6, 0))
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Clock, c.EvictInterval = mc, 24*time.Hour
	})
	ends := recordRootEnds(h)
	funcs.Store("probe-result", func(ctx *Context) (Step, error) {
		ctx.SetResult([]byte("the result"))
		return Step{}, nil
	})
	funcs.Store("probe-coded", func(ctx *Context) (Step, error) {
		return Step{}, fmt.Errorf("table t: %w", ErrFailedPrecondition)
	})
	var ids []uint64
	ids = append(ids, h.submit(&funcProc{ID: "probe-result"}, SubmitOptions{Owner: "o", Nonce: "r"}))
	ids = append(ids, h.submit(&funcProc{ID: "probe-coded"}, SubmitOptions{Owner: "o", Nonce: "c"}))
	for _, g := range []string{"probe-abort", "probe-timeout"} {
		gate, entered := make(chan struct{}), make(chan struct{})
		gates.Store(g, gate)
		gates.Store(g+"/entered", entered)
		opts := SubmitOptions{Nonce: g}
		if g == "probe-timeout" {
			opts.Timeout = time.Minute
		}
		id := h.submit(&gatedSM{Gate: g}, opts)
		<-entered
		if g == "probe-abort" {
			if err := h.x.Abort(id); err != nil {
				t.Fatal(err)
			}
		} else {
			mc.Advance(2 * time.Minute)
		}
		close(gate)
		ids = append(ids, id)
	}
	infos := make([]Info, len(ids))
	for i, id := range ids {
		infos[i] = h.wait(id)
	}
	if string(infos[0].Result) != "the result" || infos[1].ErrorCode != CodeFailedPrecondition ||
		infos[2].State != RolledBack || !infos[2].AbortRequested || infos[3].State != RolledBack {
		t.Fatalf("the roots did not end as meant: %+v", infos)
	}
	ends.checkAsLive(t, h, "retired", ids...)
}

// An acknowledged result is kept AckedResultTTL after its Ack, never
// less, also once the restart rebuilt its row from the record, and its
// nonce dedupes until then.
func TestFinishedAckedExpiryNeverEarly(t *testing.T) {
	st := store.NewMemStore()
	mc := clock.NewManual(time.Unix(1e6, 700_000_001))
	cfg := func(c *Config) {
		c.Clock, c.EvictInterval, c.ResultTTL, c.AckedResultTTL = mc, 24*time.Hour, 20*time.Second, 5*time.Second
	}
	h := startExecutor(t, st, newDomain(), cfg)
	id := h.submit(newSteps("s", 1), SubmitOptions{Nonce: "n"})
	h.wait(id)
	mc.Advance(1300 * time.Millisecond)
	if err := h.x.Ack(id); err != nil {
		t.Fatal(err)
	}
	info, err := h.x.Get(id)
	if err != nil || info.Acked.IsZero() {
		t.Fatalf("after Ack: %+v %v", info, err)
	}
	expires := info.Acked.Add(5 * time.Second)
	mc.Advance(expires.Add(-time.Nanosecond).Sub(mc.Now()))
	if n := h.x.EvictExpired(); n != 0 {
		t.Fatalf("evicted %d a nanosecond before AckedResultTTL", n)
	}
	if err := h.x.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := startExecutor(t, st, newDomain(), cfg)
	if n := h2.x.EvictExpired(); n != 0 {
		t.Fatalf("after restart: evicted %d a nanosecond before AckedResultTTL", n)
	}
	if got, ok := h2.x.LookupNonce("", "n"); !ok || got != id {
		t.Fatalf("after restart: nonce finds %d %v, want %d", got, ok, id)
	}
	mc.Advance(time.Second)
	if n := h2.x.EvictExpired(); n != 1 {
		t.Fatalf("evicted %d a second after AckedResultTTL, want 1", n)
	}
	if got, ok := h2.x.LookupNonce("", "n"); ok {
		t.Fatalf("evicted: nonce finds %d", got)
	}
}

// nonceIndex against a map of what was added and not removed: random
// adds (hashes alike in full or in their low 32 bits, ids jumping past
// 2^32, late ids below the window), evictions of the oldest or any, and
// merges; every ref kept is found, none removed is.
func TestNonceIndexMatchesModel(t *testing.T) {
	for seed := uint64(0); seed < 16; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		n := newNonceIndex()
		model := map[uint64]uint64{} // id -> hash
		nextID := uint64(1)
		if seed%2 == 1 {
			nextID = math.MaxUint32 - 500
		}
		if seed%4 == 3 {
			nextID = 1 << 40
		}
		hashes := []uint64{}
		var order []uint64
		for step := 0; step < 20000; step++ {
			switch op := r.IntN(100); {
			case op < 60:
				var h uint64
				switch {
				case len(hashes) > 0 && r.IntN(10) == 0:
					h = hashes[r.IntN(len(hashes))] // same hash
				case len(hashes) > 0 && r.IntN(10) == 0:
					h = hashes[r.IntN(len(hashes))]&math.MaxUint32 | r.Uint64()<<32 // same low 32 bits
				default:
					h = r.Uint64()
				}
				hashes = append(hashes, h)
				id := nextID
				if r.IntN(20) == 0 && len(order) > 0 {
					// a long-running root finishes late: an id below the others
					id = order[0] - 1 - uint64(r.IntN(3))
					if _, ok := model[id]; ok || id == 0 {
						continue
					}
				} else {
					nextID += 1 + uint64(r.IntN(3))
					if r.IntN(500) == 0 {
						nextID += 1 << 32 // a jump
					}
				}
				model[id] = h
				order = append(order, id)
				n.add(h, id)
			case op < 90:
				if len(order) == 0 {
					continue
				}
				i := 0
				if r.IntN(3) == 0 {
					i = r.IntN(len(order))
				}
				id := order[i]
				order = append(order[:i], order[i+1:]...)
				h := model[id]
				n.remove(h, id)
				delete(model, id)
				if got, ok := n.find(h, func(x uint64) bool { return x == id }); ok {
					t.Fatalf("seed %d step %d: removed %d found as %d", seed, step, id, got)
				}
			default:
				n.merge()
			}
			if step%97 == 0 || step == 19999 {
				for id, h := range model {
					if got, ok := n.find(h, func(x uint64) bool { return x == id }); !ok || got != id {
						t.Fatalf("seed %d step %d: find %d (hash %x) = %d %v; base %d", seed, step, id, h, got, ok, n.base)
					}
				}
				if n.len() != len(model) {
					t.Fatalf("seed %d step %d: len %d want %d", seed, step, n.len(), len(model))
				}
			}
		}
	}
}
