package procedure

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/textcut"
)

// A finished root's descendants' records are deleted with its finish (and
// a ForgetsChildren parent's children as each succeeds), to keep a master
// that runs a million regions small. An operator still wants to see the
// tree that ran for as long as its root is kept (HBase keeps its
// completed procedures a while), so the root's terminal record keeps a
// summary of each descendant: id, parent, type, final state, submission
// and finish to the millisecond, error. Packed: a few bytes each (id and
// parent as small deltas, the type as an index into the record's table of
// names, times as millisecond deltas from the root's submission), 6-8
// bytes for a child that succeeded (BenchmarkChildSummaryBytes).
//
// They live in the record the store holds anyway: the executor keeps only
// an index from a child's id to its root (childIndex, 16 bytes per
// finished root that had any), and reads the root's record back to answer
// Get of a child.
//
// A tree so big that its summaries would pass maxSummaryBytes keeps the
// summaries of its first (lowest-id) descendants and counts the rest, so
// that a root's record stays far below what a Raft entry and a gRPC
// message carry (4 MiB): 1 MiB is 130,000 children that succeeded, or
// 4,000 that failed with a long error.

// ChildSummary is what a finished root keeps of one of its descendants.
type ChildSummary struct {
	ID, ParentID        uint64
	Type                string
	State               State
	Submitted, Finished time.Time
	Error               string
}

const (
	// maxSummaryBytes bounds a root's packed summaries.
	maxSummaryBytes = 1 << 20
	// maxSummaryError bounds the error a summary keeps, in bytes.
	maxSummaryError = 256
)

// Fields of the fChildSummaries message.
const (
	sumTypes   protowire.Number = 1 // repeated: the type names entries index
	sumEntries protowire.Number = 2 // the entries, packed (appendSummaryEntry)
	sumOmitted protowire.Number = 3 // descendants left out (maxSummaryBytes)
	sumCount   protowire.Number = 4 // entries; written even if 0
	sumSpan    protowire.Number = 5 // highest entry id minus the root's id
)

// Entry flags, below the state in its third varint.
const (
	sumHasError    = 1
	sumHasFinished = 2
)

// appendSummaryEntry packs s after an entry of id prev (the root's id for
// the first): its id as a delta, its parent as 0 for the root or a delta
// back from its own id, the index of its type name, its state and flags,
// its submission as milliseconds from base (the root's), its finish as
// milliseconds from its submission, and its error.
func appendSummaryEntry(b []byte, s ChildSummary, prev, root uint64, base time.Time, typ int) []byte {
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(int64(s.ID-prev)))
	var parent uint64
	if s.ParentID != root {
		parent = protowire.EncodeZigZag(int64(s.ID-s.ParentID)) + 1
	}
	b = protowire.AppendVarint(b, parent)
	b = protowire.AppendVarint(b, uint64(typ))
	flags := uint64(s.State) << 2
	if s.Error != "" {
		flags |= sumHasError
	}
	if !s.Finished.IsZero() {
		flags |= sumHasFinished
	}
	b = protowire.AppendVarint(b, flags)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(s.Submitted.Sub(base).Milliseconds()))
	if !s.Finished.IsZero() {
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(s.Finished.Sub(s.Submitted).Milliseconds()))
	}
	if s.Error != "" {
		b = protowire.AppendString(b, capError(s.Error))
	}
	return b
}

// capError cuts msg to maxSummaryError bytes, on a rune boundary.
func capError(msg string) string { return textcut.Ellipsis(msg, maxSummaryError) }

// consumeSummaryEntry reads an entry appendSummaryEntry wrote; its type
// is left as the index typ.
func consumeSummaryEntry(b []byte, prev, root uint64, base time.Time) (s ChildSummary, typ uint64, rest []byte, err error) {
	var vs [6]uint64
	next := func(i int) bool {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			err = fmt.Errorf("%w: child summary: %v", ErrCorrupt, protowire.ParseError(n))
			return false
		}
		vs[i], b = v, b[n:]
		return true
	}
	for i := 0; i < 5; i++ {
		if !next(i) {
			return s, 0, nil, err
		}
	}
	s.ID = prev + uint64(protowire.DecodeZigZag(vs[0]))
	s.ParentID = root
	if vs[1] != 0 {
		s.ParentID = s.ID - uint64(protowire.DecodeZigZag(vs[1]-1))
	}
	typ = vs[2]
	flags := vs[3]
	s.State = State(flags >> 2)
	s.Submitted = base.Add(time.Duration(protowire.DecodeZigZag(vs[4])) * time.Millisecond)
	if flags&sumHasFinished != 0 {
		if !next(5) {
			return s, 0, nil, err
		}
		s.Finished = s.Submitted.Add(time.Duration(protowire.DecodeZigZag(vs[5])) * time.Millisecond)
	}
	if flags&sumHasError != 0 {
		msg, n := protowire.ConsumeString(b)
		if n < 0 {
			return s, 0, nil, fmt.Errorf("%w: child summary error: %v", ErrCorrupt, protowire.ParseError(n))
		}
		s.Error, b = msg, b[n:]
	}
	return s, typ, b, nil
}

// packChildSummaries is the fChildSummaries message of root (submitted at
// base) for list, sorted by id: as many as fit in maxSummaryBytes, the
// rest counted with omitted.
func packChildSummaries(root uint64, base time.Time, list []ChildSummary, omitted int) []byte {
	var (
		types   []string
		entries []byte
		prev    = root
		n       int
	)
	for i, s := range list {
		if len(entries) >= maxSummaryBytes {
			omitted += len(list) - i
			break
		}
		t := slices.Index(types, s.Type)
		if t < 0 {
			t = len(types)
			types = append(types, s.Type)
		}
		entries = appendSummaryEntry(entries, s, prev, root, base, t)
		prev = s.ID
		n++
	}
	b := make([]byte, 0, len(entries)+32)
	for _, t := range types {
		b = protowire.AppendTag(b, sumTypes, protowire.BytesType)
		b = protowire.AppendString(b, t)
	}
	if len(entries) > 0 {
		b = protowire.AppendTag(b, sumEntries, protowire.BytesType)
		b = protowire.AppendBytes(b, entries)
	}
	if omitted > 0 {
		b = protowire.AppendTag(b, sumOmitted, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(omitted))
	}
	b = protowire.AppendTag(b, sumCount, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(n))
	if n > 0 {
		b = protowire.AppendTag(b, sumSpan, protowire.VarintType)
		b = protowire.AppendVarint(b, prev-root)
	}
	return b
}

// summaryHeader is what a fChildSummaries message says of itself without
// its entries decoded.
type summaryHeader struct {
	types     []string
	entries   []byte // aliases the message
	omitted   int
	count     int
	span      uint64 // highest id minus the root's; 0 without entries
	firstDiff uint64 // lowest id minus the root's; 0 without entries
}

func readSummaryHeader(msg []byte) (summaryHeader, error) {
	var h summaryHeader
	err := walkFields(msg, "child summaries: ", func(num protowire.Number, v uint64) {
		switch num {
		case sumOmitted:
			h.omitted = int(v)
		case sumCount:
			h.count = int(v)
		case sumSpan:
			h.span = v
		}
	}, func(num protowire.Number, v []byte) error {
		switch num {
		case sumTypes:
			h.types = append(h.types, string(v))
		case sumEntries:
			h.entries = v
		}
		return nil
	})
	if len(h.entries) > 0 {
		if d, n := protowire.ConsumeVarint(h.entries); n > 0 {
			h.firstDiff = uint64(protowire.DecodeZigZag(d))
		}
	}
	return h, err
}

// unpackChildSummaries decodes the fChildSummaries message of root,
// submitted at base.
func unpackChildSummaries(msg []byte, root uint64, base time.Time) (list []ChildSummary, omitted int, err error) {
	h, err := readSummaryHeader(msg)
	if err != nil {
		return nil, 0, err
	}
	list = make([]ChildSummary, 0, min(h.count, len(h.entries)))
	err = h.each(root, base, func(s ChildSummary) { list = append(list, s) })
	if err != nil {
		return nil, 0, err
	}
	return list, h.omitted, nil
}

// each calls fn with every entry, in id order, without keeping them: a
// lookup of one in a tree of 100,000 allocates nothing per entry.
func (h *summaryHeader) each(root uint64, base time.Time, fn func(ChildSummary)) error {
	prev, b := root, h.entries
	for len(b) > 0 {
		s, typ, rest, err := consumeSummaryEntry(b, prev, root, base)
		if err != nil {
			return err
		}
		if typ >= uint64(len(h.types)) {
			return fmt.Errorf("%w: child summary %d: type %d of %d", ErrCorrupt, s.ID, typ, len(h.types))
		}
		s.Type = h.types[typ]
		fn(s)
		prev, b = s.ID, rest
	}
	return nil
}

// forgottenSummaries are the summaries of the children a tree forgot as
// they succeeded (ForgetsChildren), kept in its rootState until the root
// finishes and packs them with the rest: packed as they come, each entry
// relative to the root's id (they come out of id order), with the types
// they name in a table of their own. Bounded as the packed summaries are:
// those past maxSummaryBytes are only counted.
type forgottenSummaries struct {
	packed  []byte
	types   []*typeInfo
	count   int // entries packed
	omitted int
	// lo and hi are the lowest and highest id forgotten: a Get of an id
	// outside them decodes nothing.
	lo, hi uint64
}

func (f *forgottenSummaries) add(root uint64, base time.Time, s ChildSummary, ti *typeInfo) {
	if f.count+f.omitted == 0 {
		f.lo, f.hi = s.ID, s.ID
	}
	f.lo, f.hi = min(f.lo, s.ID), max(f.hi, s.ID)
	if len(f.packed) >= maxSummaryBytes {
		f.omitted++
		return
	}
	t := slices.Index(f.types, ti)
	if t < 0 {
		t = len(f.types)
		f.types = append(f.types, ti)
	}
	f.packed = appendSummaryEntry(f.packed, s, root, root, base, t)
	f.count++
}

// list decodes them, into a list with room for extra more: grown by
// appends, a crash's 100,000 forgotten children's list allocated twice
// its size, with the executor's lock held.
func (f *forgottenSummaries) list(root uint64, base time.Time, extra int) []ChildSummary {
	out := make([]ChildSummary, 0, f.count+extra)
	for b := f.packed; len(b) > 0; {
		s, typ, rest, err := consumeSummaryEntry(b, root, root, base)
		if err != nil || typ >= uint64(len(f.types)) {
			break // written above: cannot happen
		}
		s.Type = f.types[typ].name
		out = append(out, s)
		b = rest
	}
	return out
}

// find returns the summary of forgotten member id. It decodes the entries
// one by one, as a finished root's record is read for the same Get: only
// a Get of an id within the tree's span that no live procedure has pays
// it, and the entries are bounded (maxSummaryBytes).
func (f *forgottenSummaries) find(root uint64, base time.Time, id uint64) (ChildSummary, bool) {
	if f.count == 0 || id < f.lo || id > f.hi {
		return ChildSummary{}, false
	}
	for b := f.packed; len(b) > 0; {
		s, typ, rest, err := consumeSummaryEntry(b, root, root, base)
		if err != nil || typ >= uint64(len(f.types)) {
			break // written above: cannot happen
		}
		if s.ID == id {
			s.Type = f.types[typ].name
			return s, true
		}
		b = rest
	}
	return ChildSummary{}, false
}

// summaryOf is what a finished tree keeps of its member e.
func summaryOf(e *entry) ChildSummary {
	fin := e.finishedAt
	if fin.IsZero() && e.state.Terminal() {
		fin = e.updated // rolled back: its last write ended it
	}
	return ChildSummary{ID: e.id, ParentID: e.parent, Type: e.ti.name, State: e.state,
		Submitted: e.submitted, Finished: fin, Error: e.errMsg}
}

// childSummariesLocked packs what root (a tree whose root e just finished)
// keeps of its descendants: the members still held and those forgotten.
// Called with x.mu held; the packing is left to pack, called without it.
func (x *Executor) childSummariesLocked(e *entry) (pack func() []byte) {
	root := x.roots[e.id]
	if root == nil || root.entry != e {
		return nil
	}
	list := root.forgottenSums.list(e.id, e.submitted, len(root.members))
	for id, m := range root.members {
		if id != e.id {
			list = append(list, summaryOf(m))
		}
	}
	omitted := root.forgottenSums.omitted
	if len(list) == 0 && omitted == 0 {
		return nil
	}
	return func() []byte {
		slices.SortFunc(list, func(a, b ChildSummary) int { return cmp.Compare(a.ID, b.ID) })
		return packChildSummaries(e.id, e.submitted, list, omitted)
	}
}

// summaryInfo is the Info of descendant s of the finished root whose
// record is r (its children are added by the caller).
func summaryInfo(s ChildSummary, r *record) Info { return summaryInfoIn(s, r.id, r.owner) }

// summaryInfoIn is the Info of descendant s of the tree of root rootID,
// submitted by owner.
func summaryInfoIn(s ChildSummary, rootID uint64, owner string) Info {
	info := Info{ID: s.ID, ParentID: s.ParentID, RootID: rootID, Type: s.Type, State: s.State,
		Owner: owner, Submitted: s.Submitted, Updated: s.Finished, Finished: s.Finished,
		Error: s.Error, SummaryOnly: true}
	if info.Updated.IsZero() {
		info.Updated = s.Submitted
	}
	return info
}

// ChildSummaryInfos returns the Infos of the descendants a finished root's
// record (store.Proc.Data) keeps summaries of, by ascending id (see
// Info.SummaryOnly), and how many more it had but left out (a tree too
// big for them all). kept is false for a record that keeps none: not a
// finished root, or one finished by a version that kept no summaries
// (its direct children are still listed in its Info.Children).
func ChildSummaryInfos(data []byte) (infos []Info, omitted int, kept bool, err error) {
	return ChildSummaryInfosIn(data, 0, math.MaxUint64)
}

// ChildSummaryInfosIn is ChildSummaryInfos for the descendants with ids
// in (after, upTo] alone: what a page of a listing holds.
func ChildSummaryInfosIn(data []byte, after, upTo uint64) (infos []Info, omitted int, kept bool, err error) {
	var r record
	if err := r.unmarshal(data); err != nil {
		return nil, 0, false, err
	}
	if r.summaries == nil {
		return nil, 0, false, nil
	}
	h, err := readSummaryHeader(r.summaries)
	if err != nil {
		return nil, 0, false, fmt.Errorf("procedure %d: %w", r.id, err)
	}
	// A parent's id is below its children's: it is met first.
	at := map[uint64]int{}
	err = h.each(r.id, fromUnixNano(r.submitted), func(s ChildSummary) {
		if i, ok := at[s.ParentID]; ok {
			infos[i].Children = append(infos[i].Children, s.ID)
		}
		if s.ID > after && s.ID <= upTo {
			at[s.ID] = len(infos)
			infos = append(infos, summaryInfo(s, &r))
		}
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("procedure %d: %w", r.id, err)
	}
	return infos, h.omitted, true, nil
}

// ChildSummaryInfo finds descendant id in a finished root's record: its
// Info from the summary kept (found), or, for a direct child the record
// lists but keeps no summary of (listed: written by a version that kept
// none, or left out of a tree too big), nothing.
func ChildSummaryInfo(data []byte, id uint64) (info Info, found, listed bool, err error) {
	var r record
	if err := r.unmarshal(data); err != nil {
		return Info{}, false, false, err
	}
	return childSummaryInfoOf(&r, id)
}

func childSummaryInfoOf(r *record, id uint64) (info Info, found, listed bool, err error) {
	if r.summaries != nil {
		h, err := readSummaryHeader(r.summaries)
		if err == nil {
			err = h.each(r.id, fromUnixNano(r.submitted), func(s ChildSummary) {
				switch {
				case s.ID == id:
					info, found = summaryInfo(s, r), true
				case found && s.ParentID == id:
					info.Children = append(info.Children, s.ID)
				}
			})
		}
		if err != nil {
			return Info{}, false, false, fmt.Errorf("procedure %d: %w", r.id, err)
		}
		if found {
			return info, true, true, nil
		}
	}
	return Info{}, false, slices.Contains(r.children, id), nil
}

// ChildSpan returns the lowest and highest ids of the descendants a
// finished root's record names (in its summaries or its list of
// children), without decoding the rest: ok is false if it names none. A
// descendant of the root is within them; not every id within them is one.
func ChildSpan(data []byte) (lo, hi uint64, ok bool) {
	var id uint64
	var sums, kids []byte
	err := walkFields(data, "", func(num protowire.Number, v uint64) {
		if num == fID {
			id = v
		}
	}, func(num protowire.Number, v []byte) error {
		switch num {
		case fChildSummaries:
			sums = v
		case fChildren:
			kids = v
		}
		return nil
	})
	if err != nil || id == 0 {
		return 0, 0, false
	}
	return childSpanOf(id, sums, kids)
}

// childSpanOf is ChildSpan of root id, from its summaries and packed
// children as written.
func childSpanOf(id uint64, sums, kids []byte) (lo, hi uint64, ok bool) {
	if sums != nil {
		if h, err := readSummaryHeader(sums); err == nil && h.count > 0 {
			lo, hi, ok = id+h.firstDiff, id+h.span, true
		}
	}
	for prev := id; len(kids) > 0; {
		d, n := protowire.ConsumeVarint(kids)
		if n < 0 {
			break
		}
		kids = kids[n:]
		prev += uint64(protowire.DecodeZigZag(d))
		if !ok {
			lo, hi, ok = prev, prev, true
		}
		lo, hi = min(lo, prev), max(hi, prev)
	}
	return lo, hi, ok
}

// childIndex finds the finished roots that may keep the summary of a
// descendant: one span of ids per finished root that had descendants, by
// root id. A tree's descendants take ids above its root's, mostly the
// ones that follow it, so one span per tree does what an entry per
// descendant would (a table create has 10,000): 16 bytes per finished
// root with descendants, none for the others. Spans of trees that ran at
// once overlap: a lookup reads the record of each root whose span holds
// the id (their summaries say which has it). Rebuilt by the load, as the
// finished roots are retired; a span goes with its root's eviction.
type childIndex struct {
	spans []childSpan
	// maxHi is the largest hi of spans: a lookup of id looks at the roots
	// from id-maxHi up.
	maxHi uint64
}

type childSpan struct {
	root uint64
	// lo and hi are the lowest and highest descendant's offset from root.
	lo, hi uint32
}

func (ci *childIndex) search(root uint64) (int, bool) {
	if n := len(ci.spans); n == 0 || ci.spans[n-1].root < root {
		return n, false // mostly appended: roots finish about in id order
	}
	return slices.BinarySearchFunc(ci.spans, root, func(s childSpan, id uint64) int { return cmp.Compare(s.root, id) })
}

// add indexes the descendants of root, between lo and hi.
func (ci *childIndex) add(root, lo, hi uint64) {
	if lo <= root || hi < lo || hi-root > math.MaxUint32 {
		return // not a tree's: ids are handed out upwards
	}
	s := childSpan{root: root, lo: uint32(lo - root), hi: uint32(hi - root)}
	i, ok := ci.search(root)
	if ok {
		ci.spans[i] = s
	} else {
		ci.spans = slices.Insert(ci.spans, i, s)
	}
	ci.maxHi = max(ci.maxHi, uint64(s.hi))
}

// roots returns the roots whose span meets the ids in (after, upTo].
func (ci *childIndex) roots(after, upTo uint64) []uint64 {
	from := uint64(0)
	if after+1 > ci.maxHi {
		from = after + 1 - ci.maxHi
	}
	i, _ := ci.search(from)
	var out []uint64
	for ; i < len(ci.spans) && ci.spans[i].root < upTo; i++ {
		s := ci.spans[i]
		if s.root+uint64(s.lo) <= upTo && s.root+uint64(s.hi) > after {
			out = append(out, s.root)
		}
	}
	return out
}

// deleteSorted drops the spans of roots ids (ascending), evicted.
func (ci *childIndex) deleteSorted(ids []uint64) {
	if len(ci.spans) == 0 || len(ids) == 0 {
		return
	}
	out := ci.spans[:0]
	ci.maxHi = 0
	for _, s := range ci.spans {
		for len(ids) > 0 && ids[0] < s.root {
			ids = ids[1:]
		}
		if len(ids) > 0 && ids[0] == s.root {
			continue
		}
		out = append(out, s)
		ci.maxHi = max(ci.maxHi, uint64(s.hi))
	}
	ci.spans = out
	if cap(ci.spans) > 1024 && len(ci.spans) < cap(ci.spans)/4 {
		ci.spans = slices.Clone(ci.spans)
	}
}

// indexChildrenLocked indexes the descendants finished root e names.
func (x *Executor) indexChildrenLocked(e *entry) {
	lo, hi, ok := childSpanOf(e.id, e.summaries, nil)
	for _, c := range e.children {
		if !ok {
			lo, hi, ok = c, c, true
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	if ok {
		x.children.add(e.id, lo, hi)
	}
}

// summaryInfoLocked is the Info of descendant id of a finished root, from
// the summary the root's record keeps of it, or of a member a live tree
// forgot, from the summary the tree keeps of it for its root's record.
func (x *Executor) summaryInfoLocked(id uint64) (Info, error) {
	for _, rid := range x.children.roots(id-1, id) {
		data, ok := x.indexedRecordLocked(rid)
		if !ok {
			continue
		}
		var r record
		if err := r.unmarshal(data); err != nil {
			continue
		}
		info, found, listed, err := childSummaryInfoOf(&r, id)
		switch {
		case err != nil:
			return Info{}, err
		case found:
			return info, nil
		case listed:
			return Info{}, NoSummaryError(id, rid)
		}
	}
	if !x.writesFormat2() {
		// Its root's record will keep no summaries: a member answered now
		// would be lost again as the root finishes.
		return Info{}, Errorf(ErrNotFound, "procedure %d does not exist", id)
	}
	for rid, root := range x.forgetting {
		if rid >= id {
			continue // ids are handed out upwards: not of its tree
		}
		if s, ok := root.forgottenSums.find(rid, root.entry.submitted, id); ok {
			// A forgotten member spawned no children (forgetChildLocked).
			return summaryInfoIn(s, rid, root.entry.owner), nil
		}
	}
	return Info{}, Errorf(ErrNotFound, "procedure %d does not exist", id)
}

// indexedRecordLocked reads the record of root rid, which children
// indexes: retired, or finished and not yet retired (finishRoot indexes it
// as it lets go of its members, once its last record is written).
func (x *Executor) indexedRecordLocked(rid uint64) ([]byte, bool) {
	if e := x.procs[rid]; e != nil && x.fin.recs != nil {
		return e.lastRec, e.lastRec != nil
	}
	return x.finishedRecordLocked(rid)
}

// NoSummaryError is the ErrNotFound of child id, which its finished root
// lists but keeps no summary of.
func NoSummaryError(id, root uint64) error {
	return Errorf(ErrNotFound, "procedure %d does not exist: its record went with its root %d's finish, "+
		"and no summary of it was kept (the root finished on a version that kept none, "+
		"or its tree was too big to summarise every member)", id, root)
}

// SummarisedRoots returns the finished roots that may keep summaries of
// descendants with ids in (after, upTo], by ascending id: a listing reads
// their records for those of its page.
func (x *Executor) SummarisedRoots(after, upTo uint64) []uint64 {
	x.mu.Lock()
	defer x.unlock()
	return x.children.roots(after, upTo)
}
