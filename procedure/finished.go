package procedure

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/store"
)

// A finished root is kept ResultTTL (15 min) for its result, and a master
// that runs a million regions finishes hundreds of thousands of roots in
// that time. Its live entry (the procedure object, its history, runs,
// timers, the rootState and a nonce entry with its channel) cost about
// 2.9 kB of heap (BenchmarkFinishedFootprint); what a finished root is
// asked for, beyond what lists are filtered by, is in its stored record,
// which the store holds anyway. So once a root is finished and its last
// write done, its entry is retired: the executor keeps a row of 16 bytes
// without a pointer (finishedTable: the GC never scans it), and an 8-byte
// ref of its nonce's hash (nonceIndex), and reads the record back
// (store.Reader) for whatever else is asked: Get, Wait and List decode
// it, an Ack rewrites it. 26-29 bytes per finished root in all, with the
// slack of the slices' growth and the refs not merged yet; a root that
// had descendants adds a 16-byte span of their ids to the child index
// (childsummary.go), which finds the summaries its record keeps of them.

// finishedRoot is what the executor keeps of a finished root, by id in
// Executor.finished: what List filters by, and what its eviction needs;
// finishedTable keeps it packed (finishedRow).
type finishedRoot struct {
	// expires is when its result expires (unix nanos): ResultTTL after it
	// finished, or AckedResultTTL after its Ack if that comes first.
	expires int64
	owner   uint32 // finishedIndex.owners
	typ     uint16 // finishedIndex.types
	state   State
	flags   finishedFlags
}

type finishedFlags uint8

const (
	finAcked finishedFlags = 1 << iota // acknowledged (an Ack of it changes nothing)
)

// maxTypes bounds a Registry, so that a finished root names its type in
// two bytes.
const maxTypes = math.MaxUint16

// finishedIndex holds what the finished roots share, and what finds them
// by something other than their id.
type finishedIndex struct {
	// owners and types intern the owners and types of finished roots;
	// neither shrinks (a handful of each, in practice).
	owners  []string
	ownerAt map[string]uint32
	types   []*typeInfo
	typeAt  map[*typeInfo]uint16
	// nonces finds a finished root by the hash of its nonce key; the
	// record confirms the key.
	seed   maphash.Seed
	nonces nonceIndex
	// recs holds the last record of each finished root when the store
	// cannot read one back (no store.Reader: the WAL).
	recs map[uint64][]byte
	// rewrite serialises the writes of finished records (an Ack) with
	// their eviction, so that an Ack never writes back an evicted record.
	rewrite sync.Mutex
}

func newFinishedIndex(st store.Store) *finishedIndex {
	fi := &finishedIndex{
		owners: []string{""}, ownerAt: map[string]uint32{"": 0},
		typeAt: map[*typeInfo]uint16{}, seed: maphash.MakeSeed(),
		nonces: newNonceIndex(),
	}
	if _, ok := st.(store.Reader); !ok {
		fi.recs = map[uint64][]byte{}
	}
	return fi
}

func (fi *finishedIndex) owner(o string) uint32 {
	if i, ok := fi.ownerAt[o]; ok {
		return i
	}
	i := uint32(len(fi.owners))
	fi.owners = append(fi.owners, o)
	fi.ownerAt[o] = i
	return i
}

func (fi *finishedIndex) typeOf(ti *typeInfo) uint16 {
	if i, ok := fi.typeAt[ti]; ok {
		return i
	}
	i := uint16(len(fi.types)) // a Registry holds fewer than maxTypes
	fi.types = append(fi.types, ti)
	fi.typeAt[ti] = i
	return i
}

func (fi *finishedIndex) nonceHash(key string) uint64 { return maphash.String(fi.seed, key) }

// expiry is when a result finished at finished (and acknowledged at
// acked, if not zero) expires.
func (x *Executor) expiry(finished, acked time.Time) int64 {
	if finished.IsZero() {
		return math.MinInt64 // a record without its finish (none is written so): expired
	}
	exp := finished.Add(x.cfg.ResultTTL).UnixNano()
	if !acked.IsZero() {
		exp = min(exp, acked.Add(x.cfg.AckedResultTTL).UnixNano())
	}
	return exp
}

// retireLocked replaces finished root e by its finishedRoot: e leaves the
// table, its rootState and its nonce entry go. rec is its last record
// (only kept when the store cannot read it back). e stays valid for
// whoever still holds it (a Wait), but is never written again.
func (x *Executor) retireLocked(e *entry, rec []byte) {
	if e.retired {
		return
	}
	e.retired = true
	x.forgetLocked(e.id)
	delete(x.roots, e.id)
	delete(x.forgetting, e.id)
	f := finishedRoot{
		expires: x.expiry(e.finishedAt, e.ackedAt),
		owner:   x.fin.owner(e.owner), typ: x.fin.typeOf(e.ti), state: e.state,
	}
	if !e.ackedAt.IsZero() {
		f.flags |= finAcked
	}
	x.finished.put(e.id, f)
	addCount(x.live.byState, typeState{e.ti, e.state}, 1)
	if x.fin.recs != nil {
		x.fin.recs[e.id] = rec
	}
	if e.nonce != "" {
		nk := nonceKey(e.owner, e.nonce)
		if ne := x.nonces[nk]; ne != nil && ne.id == e.id {
			delete(x.nonces, nk)
		}
		x.indexFinishedNonceLocked(nk, e.id)
	}
}

func (x *Executor) indexFinishedNonceLocked(nk string, id uint64) {
	x.fin.nonces.add(x.fin.nonceHash(nk), id)
}

// finishedNonceIsLocked reports whether finished root id was submitted
// with nonce key nk; ok is false when its record cannot be read.
func (x *Executor) finishedNonceIsLocked(id uint64, nk string) (is, ok bool) {
	data, found := x.finishedRecordLocked(id)
	if !found {
		return false, false
	}
	owner, nonce := recordNonce(data)
	return len(owner)+1+len(nonce) == len(nk) && nk[len(owner)] == 0 &&
		nk[:len(owner)] == string(owner) && nk[len(owner)+1:] == string(nonce), true
}

// finishedByNonceLocked finds the finished root submitted with nonce key nk.
func (x *Executor) finishedByNonceLocked(nk string) (uint64, bool) {
	return x.fin.nonces.find(x.fin.nonceHash(nk), func(id uint64) bool {
		is, _ := x.finishedNonceIsLocked(id, nk)
		return is
	})
}

// finishedRecordLocked reads finished root id's last record back.
func (x *Executor) finishedRecordLocked(id uint64) ([]byte, bool) {
	if x.fin.recs != nil {
		b, ok := x.fin.recs[id]
		return b, ok
	}
	return x.store.(store.Reader).Proc(id)
}

// finishedInfoLocked is the Info of finished root id, from its record;
// from what the executor keeps of it if the record cannot be read (a
// leader that lost its term may find it evicted by the next one).
func (x *Executor) finishedInfoLocked(id uint64, f finishedRoot) Info {
	ti := x.fin.types[f.typ]
	if data, ok := x.finishedRecordLocked(id); ok {
		if info, err := DecodeInfo(data); err == nil {
			info.Data = nil // as the executor's snapshots of live procedures
			return info
		}
	}
	return Info{ID: id, RootID: id, Type: ti.name, Version: ti.version, State: f.state, Owner: x.fin.owners[f.owner]}
}

// matchFinishedLocked reports whether finished root id passes f's filters.
func (x *Executor) matchFinishedLocked(id uint64, fr finishedRoot, f Filter) bool {
	if f.Type != "" && x.fin.types[fr.typ].name != f.Type || f.Owner != "" && x.fin.owners[fr.owner] != f.Owner ||
		!f.matchState(fr.state) {
		return false
	}
	if f.SubmittedAfter.IsZero() && f.SubmittedBefore.IsZero() {
		return true
	}
	data, ok := x.finishedRecordLocked(id)
	if !ok {
		return false
	}
	s, err := DecodeSummary(data)
	return err == nil && f.submittedIn(s.Submitted)
}

// forgetFinishedLocked drops the counts and the nonce of finished root id
// (evicted; the caller takes it out of x.finished); data is its record,
// read before it was deleted, for its nonce.
func (x *Executor) forgetFinishedLocked(id uint64, data []byte) {
	f, ok := x.finished.get(id)
	if !ok {
		return
	}
	addCount(x.live.byState, typeState{x.fin.types[f.typ], f.state}, -1)
	if x.fin.recs != nil {
		delete(x.fin.recs, id)
	}
	if owner, nonce := recordNonce(data); len(nonce) > 0 {
		x.fin.nonces.remove(x.fin.nonceHash(nonceKey(string(owner), string(nonce))), id)
	}
}

// ackFinished acknowledges finished root id's result: its record is
// written again with the Ack (a write counted in its Runs and History,
// as any), and it expires AckedResultTTL after at.
func (x *Executor) ackFinished(id uint64, at time.Time) error {
	x.fin.rewrite.Lock()
	defer x.fin.rewrite.Unlock()
	x.mu.Lock()
	f, ok := x.finished.get(id)
	if !ok {
		x.unlock()
		return Errorf(ErrNotFound, "procedure %d does not exist", id)
	}
	if x.stopping {
		x.unlock()
		return nil
	}
	// The record, not the flag, says whether the Ack is written: an Ack
	// of a root that was retired as it came is flagged, not yet written.
	data, ok := x.finishedRecordLocked(id)
	x.unlock()
	if !ok {
		return Errorf(ErrNotFound, "procedure %d does not exist", id)
	}
	var r record
	if err := r.unmarshal(data); err != nil {
		return fmt.Errorf("procedure %d: %w", id, err)
	}
	if r.ackedAt != 0 {
		return nil
	}
	now := x.clock.Now()
	if at.IsZero() {
		at = now
	}
	r.ackedAt = unixNano(at)
	r.noteWrite(x.cfg.Node, now)
	if !x.writesFormat2() {
		// Not written back below format 2, whoever wrote them.
		r.submitter, r.summaries = "", nil
	}
	rec := r.marshal()
	if err := x.store.Update(store.Proc{ID: id, Data: rec}); err != nil {
		x.setFatal(err)
		return fmt.Errorf("%w: %w", ErrStoreFailed, err)
	}
	x.mu.Lock()
	if f, ok := x.finished.get(id); ok {
		f.flags |= finAcked
		f.expires = min(f.expires, at.Add(x.cfg.AckedResultTTL).UnixNano())
		x.finished.put(id, f)
		if x.fin.recs != nil {
			x.fin.recs[id] = rec
		}
	}
	h := hearing{ls: x.listeners, cls: x.changeLs}
	if len(h.ls) > 0 {
		h.info = x.finishedInfoLocked(id, f)
	}
	if len(h.cls) > 0 {
		h.change = Change{ID: id, RootID: id, Type: x.fin.types[f.typ].name, State: f.state}
	}
	x.unlock()
	h.tell()
	return nil
}

// recordNonce reads the owner and nonce of a record, without decoding the
// rest; they alias data.
func recordNonce(data []byte) (owner, nonce []byte) {
	err := walkFields(data, "", nil, func(num protowire.Number, v []byte) error {
		switch num {
		case fOwner:
			owner = v
		case fNonce:
			nonce = v
		}
		return nil
	})
	if err != nil {
		return nil, nil
	}
	return owner, nonce
}

// changeFinished runs change (of Pause, Resume or Ack) on finished root
// id, as an entry that stands for it: refused, or no change, or an Ack.
func (x *Executor) changeFinished(id uint64, change func(e *entry) (bool, error)) error {
	x.mu.Lock()
	f, ok := x.finished.get(id)
	if !ok {
		x.unlock()
		return Errorf(ErrNotFound, "procedure %d does not exist", id)
	}
	stand := &entry{id: id, root: id, ti: x.fin.types[f.typ], state: f.state, retired: true}
	if f.flags&finAcked != 0 {
		stand.ackedAt = time.Unix(0, 1) // acknowledged: when does not matter here
	}
	changed, err := change(stand)
	x.unlock()
	if err != nil || !changed {
		return err
	}
	if f.flags&finAcked == 0 && !stand.ackedAt.IsZero() {
		return x.ackFinished(id, stand.ackedAt)
	}
	return nil
}

// finishedTable holds the finished roots in id order, in one slice of
// 16-byte rows without a pointer: a map of them costs half as much again
// in the free slots it keeps, and lists want them in id order anyway.
// Roots mostly finish in the order of their ids, so a root is inserted
// near the end; one that ran long is inserted further in, moving the rows
// after it (a few milliseconds at a million).
//
// A row names its owner, type, state and flags together by a class: the
// finished roots of a master fall in a handful of them (owners times
// types times the three ends), which classes intern; it never shrinks, as
// the owners and types it names.
type finishedTable struct {
	rows    []finishedRow
	classes []finishedClass
	classAt map[finishedClass]uint32
}

type finishedRow struct {
	id uint64
	// expires is finishedRoot.expires in whole seconds (unix), rounded
	// up: a result is kept at least as long as its rule says, and at most
	// a second longer (the evictor runs every EvictInterval anyway).
	expires uint32
	class   uint32
}

// finishedClass is what a finishedRoot holds but its expiry.
type finishedClass struct {
	owner uint32
	typ   uint16
	state State
	flags finishedFlags
}

func expirySeconds(ns int64) uint32 {
	switch {
	case ns <= 0:
		return 0 // already expired (math.MinInt64: a record without its finish)
	case ns > int64(math.MaxUint32)*int64(time.Second):
		return math.MaxUint32
	}
	return uint32((ns + int64(time.Second) - 1) / int64(time.Second))
}

// expiresAt is when row r expires, in unix nanos.
func (r finishedRow) expiresAt() int64 { return int64(r.expires) * int64(time.Second) }

func (t *finishedTable) class(c finishedClass) uint32 {
	if i, ok := t.classAt[c]; ok {
		return i
	}
	if t.classAt == nil {
		t.classAt = map[finishedClass]uint32{}
	}
	i := uint32(len(t.classes))
	t.classes = append(t.classes, c)
	t.classAt[c] = i
	return i
}

func (t *finishedTable) row(id uint64, f finishedRoot) finishedRow {
	return finishedRow{id: id, expires: expirySeconds(f.expires),
		class: t.class(finishedClass{owner: f.owner, typ: f.typ, state: f.state, flags: f.flags})}
}

// at returns the i-th row, unpacked.
func (t *finishedTable) at(i int) (uint64, finishedRoot) {
	r := t.rows[i]
	c := t.classes[r.class]
	return r.id, finishedRoot{expires: r.expiresAt(), owner: c.owner, typ: c.typ, state: c.state, flags: c.flags}
}

// search returns where id is, or would be inserted.
func (t *finishedTable) search(id uint64) (int, bool) {
	// Most lookups are of the newest roots: try the end first.
	if n := len(t.rows); n == 0 || t.rows[n-1].id < id {
		return n, false
	}
	lo, hi := 0, len(t.rows)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.rows[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(t.rows) && t.rows[lo].id == id
}

func (t *finishedTable) get(id uint64) (finishedRoot, bool) {
	if i, ok := t.search(id); ok {
		_, f := t.at(i)
		return f, true
	}
	return finishedRoot{}, false
}

func (t *finishedTable) put(id uint64, f finishedRoot) {
	i, ok := t.search(id)
	if ok {
		t.rows[i] = t.row(id, f)
		return
	}
	t.rows = slices.Insert(t.rows, i, t.row(id, f))
}

func (t *finishedTable) len() int { return len(t.rows) }

// deleteSorted removes ids (ascending) in one pass, and gives memory back
// once the table is down to a quarter of its capacity.
func (t *finishedTable) deleteSorted(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	out := t.rows[:0]
	for _, r := range t.rows {
		for len(ids) > 0 && ids[0] < r.id {
			ids = ids[1:]
		}
		if len(ids) > 0 && ids[0] == r.id {
			ids = ids[1:]
			continue
		}
		out = append(out, r)
	}
	clear(t.rows[len(out):])
	t.rows = out
	if cap(t.rows) > 1024 && len(t.rows) < cap(t.rows)/4 {
		t.rows = slices.Clone(t.rows)
	}
}

// after returns the index of the first row above id.
func (t *finishedTable) after(id uint64) int {
	i, ok := t.search(id)
	if ok {
		i++
	}
	return i
}

// nonceIndex maps the hashes of finished roots' nonce keys to their ids:
// a slice of 8-byte refs sorted by hash, and a map of the refs added
// since it was last sorted (a map of them all cost twice as much, in the
// free slots a map keeps). A ref keeps 32 bits of the hash, and its id
// as an offset from base: a lookup confirms its root's nonce from the
// record anyway, so a shorter hash only costs a record read on the rare
// collision, and a million refs cost 8 MB instead of 16. The roots kept
// (ResultTTL) span far fewer than 2^32 ids; one outside base's window is
// kept whole in wide until a merge moves base to take it in. Several roots
// may share a hash (the records tell them apart); a ref whose root is
// evicted is dropped at the next merge, and until then finds no record
// (the eviction of a root whose record could not be read leaves its ref
// to the same fate, found by no lookup).
type nonceIndex struct {
	sorted []nonceRef
	recent map[uint32]uint32   // added since the last merge: hash to id offset
	extra  []nonceRef          // added since the last merge, their hash taken in recent
	gone   map[nonceRef]bool   // evicted from sorted, dropped at the next merge
	wide   map[uint64][]uint64 // ids outside base's window, by whole hash
	base   uint64
	// wideAt is how many hashes wide held when a rebase last could not
	// take them in: the next try waits until it holds twice as many.
	wideAt int
}

type nonceRef struct{ hash, id uint32 }

func newNonceIndex() nonceIndex {
	return nonceIndex{recent: map[uint32]uint32{}, gone: map[nonceRef]bool{}, wide: map[uint64][]uint64{}}
}

// narrow returns the ref of (h, id), or false for an id kept in wide.
func (n *nonceIndex) narrow(h, id uint64) (nonceRef, bool) {
	if id < n.base || id-n.base > math.MaxUint32 {
		return nonceRef{}, false
	}
	return nonceRef{uint32(h), uint32(id - n.base)}, true
}

func (n *nonceIndex) idOf(r nonceRef) uint64 { return n.base + uint64(r.id) }

// mergeFloor is the fewest recent refs that are merged: below it, the
// map is cheaper to keep than the slice is to copy.
const mergeFloor = 1024

func (n *nonceIndex) add(h, id uint64) {
	r, ok := n.narrow(h, id)
	if !ok {
		n.wide[h] = append(n.wide[h], id)
		if len(n.wide) > max(mergeFloor, 2*n.wideAt) {
			n.merge()
		}
		return
	}
	if _, taken := n.recent[r.hash]; taken {
		n.extra = append(n.extra, r)
	} else {
		n.recent[r.hash] = r.id
	}
	// An eighth as many as the slice would keep a map of 125 k refs at a
	// million, 2 bytes a root in its slots; a sixteenth halves that, for
	// 16 refs copied per ref added.
	if len(n.recent) > max(mergeFloor, len(n.sorted)/16) {
		n.merge()
	}
}

// find returns the first id of hash h that is (says is).
func (n *nonceIndex) find(h uint64, is func(id uint64) bool) (uint64, bool) {
	for _, id := range n.wide[h] {
		if is(id) {
			return id, true
		}
	}
	h32 := uint32(h)
	if off, ok := n.recent[h32]; ok && is(n.idOf(nonceRef{h32, off})) {
		return n.idOf(nonceRef{h32, off}), true
	}
	for _, r := range n.extra {
		if r.hash == h32 && is(n.idOf(r)) {
			return n.idOf(r), true
		}
	}
	i, _ := slices.BinarySearchFunc(n.sorted, h32, func(r nonceRef, h uint32) int {
		switch {
		case r.hash < h:
			return -1
		case r.hash > h:
			return 1
		}
		return 0
	})
	for ; i < len(n.sorted) && n.sorted[i].hash == h32; i++ {
		if r := n.sorted[i]; !n.gone[r] && is(n.idOf(r)) {
			return n.idOf(r), true
		}
	}
	return 0, false
}

// remove drops the ref of an evicted root.
func (n *nonceIndex) remove(h, id uint64) {
	r, ok := n.narrow(h, id)
	if !ok {
		if ids := n.wide[h]; slices.Contains(ids, id) {
			if ids = slices.DeleteFunc(ids, func(x uint64) bool { return x == id }); len(ids) == 0 {
				delete(n.wide, h)
			} else {
				n.wide[h] = ids
			}
		}
		return
	}
	if got, ok := n.recent[r.hash]; ok && got == r.id {
		delete(n.recent, r.hash)
		return
	}
	if i := slices.Index(n.extra, r); i >= 0 {
		n.extra = slices.Delete(n.extra, i, i+1)
		return
	}
	n.gone[r] = true
}

// merge sorts what was added into a new slice of exactly the refs kept,
// without the evicted ones: O(refs), after each eviction and whenever
// the map holds a sixteenth as many as the slice.
func (n *nonceIndex) merge() {
	if len(n.recent) == 0 && len(n.extra) == 0 && len(n.gone) == 0 && len(n.wide) == 0 {
		return
	}
	add := make([]nonceRef, 0, len(n.recent)+len(n.extra))
	for h, id := range n.recent {
		add = append(add, nonceRef{h, id})
	}
	add = append(add, n.extra...)
	cmp := func(a, b nonceRef) int {
		switch {
		case a.hash != b.hash:
			if a.hash < b.hash {
				return -1
			}
			return 1
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	}
	slices.SortFunc(add, cmp)
	out := make([]nonceRef, 0, max(0, len(n.sorted)-len(n.gone))+len(add))
	old := n.sorted
	for len(old) > 0 || len(add) > 0 {
		if len(add) == 0 || len(old) > 0 && cmp(old[0], add[0]) <= 0 {
			if !n.gone[old[0]] {
				out = append(out, old[0])
			}
			old = old[1:]
			continue
		}
		out = append(out, add[0])
		add = add[1:]
	}
	n.sorted = out
	// A new map, not the old one cleared: a cleared map keeps the slots
	// of the most it ever held.
	n.recent = map[uint32]uint32{}
	n.extra = nil
	clear(n.gone)
	n.rebase()
}

// rebase moves base to the lowest id kept, if the ids in wide then fit
// its window, and adds them as refs: a base move keeps the refs' order,
// as it shifts every offset alike.
func (n *nonceIndex) rebase() {
	if len(n.wide) == 0 {
		return
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, ids := range n.wide {
		for _, id := range ids {
			lo, hi = min(lo, id), max(hi, id)
		}
	}
	if len(n.sorted) > 0 {
		// Sorted by hash, not id: the window is found by a pass.
		for _, r := range n.sorted {
			id := n.idOf(r)
			lo, hi = min(lo, id), max(hi, id)
		}
	}
	if hi-lo > math.MaxUint32 {
		n.wideAt = len(n.wide)
		return
	}
	n.wideAt = 0
	for i := range n.sorted {
		n.sorted[i].id = uint32(n.idOf(n.sorted[i]) - lo)
	}
	n.base = lo
	wide := n.wide
	n.wide = map[uint64][]uint64{}
	for h, ids := range wide {
		for _, id := range ids {
			n.add(h, id)
		}
	}
	n.merge()
}

// len counts the refs, for tests.
func (n *nonceIndex) len() int {
	k := len(n.sorted) - len(n.gone) + len(n.recent) + len(n.extra)
	for _, ids := range n.wide {
		k += len(ids)
	}
	return k
}
