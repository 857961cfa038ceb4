package store

// Trackers: which procedure ids a segment touched.
//
// A tracker keeps two bits per proc id, modified and deleted, in nodes that
// each cover nodeIDs (4096) consecutive ids as nodeWords (64) words per bit.
// Nodes are kept sorted by their first id and found by binary search, with a
// hint for the last node used: proc ids are assigned monotonically, so almost
// every lookup hits the newest node. A node is a fixed 1 KiB; a dense range of
// a million ids needs 245 nodes (HBase's BitSetNode could end up holding one
// word per node, making every lookup a walk over thousands of tiny nodes).
//
// Bit semantics, per segment: a put sets modified and clears deleted; a
// delete sets deleted and leaves modified as it was. So after any sequence of
// writes within the segment:
//
//	held    = modified &^ deleted  the segment's last word on the id is an image
//	deleted                        the segment's last word on the id is a delete
//	touched = modified | deleted   the segment says anything about the id
//
// idSet is the one-bit variant used for the global live set and for the
// holding set of the oldest segment.

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"sort"
)

const (
	nodeShift = 12
	nodeIDs   = 1 << nodeShift
	nodeWords = nodeIDs / 64
)

func nodeBase(id uint64) uint64 { return id &^ (nodeIDs - 1) }

func bitPos(id uint64) (word int, mask uint64) {
	off := id & (nodeIDs - 1)
	return int(off >> 6), 1 << (off & 63)
}

type trackerNode struct {
	base     uint64
	mod, del [nodeWords]uint64
}

type tracker struct {
	nodes []*trackerNode // sorted by base
	hint  int
}

func newTracker() *tracker { return &tracker{} }

func (t *tracker) find(base uint64) (int, bool) {
	if t.hint < len(t.nodes) && t.nodes[t.hint].base == base {
		return t.hint, true
	}
	i := sort.Search(len(t.nodes), func(i int) bool { return t.nodes[i].base >= base })
	return i, i < len(t.nodes) && t.nodes[i].base == base
}

func (t *tracker) node(id uint64, create bool) *trackerNode {
	base := nodeBase(id)
	i, ok := t.find(base)
	if !ok {
		if !create {
			return nil
		}
		t.nodes = append(t.nodes, nil)
		copy(t.nodes[i+1:], t.nodes[i:])
		t.nodes[i] = &trackerNode{base: base}
	}
	t.hint = i
	return t.nodes[i]
}

func (t *tracker) put(id uint64) {
	n := t.node(id, true)
	w, m := bitPos(id)
	n.mod[w] |= m
	n.del[w] &^= m
}

func (t *tracker) delete(id uint64) {
	n := t.node(id, true)
	w, m := bitPos(id)
	n.del[w] |= m
}

// state returns the modified and deleted bits of id.
func (t *tracker) state(id uint64) (mod, del bool) {
	n := t.node(id, false)
	if n == nil {
		return false, false
	}
	w, m := bitPos(id)
	return n.mod[w]&m != 0, n.del[w]&m != 0
}

// forEach calls fn for every id with held (modified, not deleted) or deleted
// state, in ascending order; fn's bool is true for held ids.
func (t *tracker) forEach(fn func(id uint64, held bool)) {
	for _, n := range t.nodes {
		for w := 0; w < nodeWords; w++ {
			held := n.mod[w] &^ n.del[w]
			all := held | n.del[w]
			for all != 0 {
				b := bits.TrailingZeros64(all)
				all &= all - 1
				fn(n.base+uint64(w*64+b), held&(1<<b) != 0)
			}
		}
	}
}

// encode appends the tracker: uvarint node count; per node uvarint
// (base>>nodeShift) delta from the previous node, uint64 mask of non-zero
// modified words, uint64 mask of non-zero deleted words, then those words.
func (t *tracker) encode(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t.nodes)))
	prev := uint64(0)
	for _, n := range t.nodes {
		k := n.base >> nodeShift
		dst = binary.AppendUvarint(dst, k-prev)
		prev = k
		var mm, dm uint64
		for w := 0; w < nodeWords; w++ {
			if n.mod[w] != 0 {
				mm |= 1 << w
			}
			if n.del[w] != 0 {
				dm |= 1 << w
			}
		}
		dst = binary.LittleEndian.AppendUint64(dst, mm)
		dst = binary.LittleEndian.AppendUint64(dst, dm)
		for w := 0; w < nodeWords; w++ {
			if n.mod[w] != 0 {
				dst = binary.LittleEndian.AppendUint64(dst, n.mod[w])
			}
		}
		for w := 0; w < nodeWords; w++ {
			if n.del[w] != 0 {
				dst = binary.LittleEndian.AppendUint64(dst, n.del[w])
			}
		}
	}
	return dst
}

func decodeTracker(p []byte) (*tracker, []byte, error) {
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p))/17 {
		return nil, nil, errors.New("bad tracker node count")
	}
	p = p[n:]
	t := &tracker{nodes: make([]*trackerNode, 0, count)}
	prev := uint64(0)
	for i := uint64(0); i < count; i++ {
		d, n := binary.Uvarint(p)
		if n <= 0 || (i > 0 && d == 0) || d > (^uint64(0)>>nodeShift)-prev {
			return nil, nil, errors.New("bad tracker node base")
		}
		p = p[n:]
		prev += d
		if len(p) < 16 {
			return nil, nil, errors.New("truncated tracker node")
		}
		mm := binary.LittleEndian.Uint64(p)
		dm := binary.LittleEndian.Uint64(p[8:])
		p = p[16:]
		need := 8 * (bits.OnesCount64(mm) + bits.OnesCount64(dm))
		if len(p) < need {
			return nil, nil, errors.New("truncated tracker node")
		}
		nd := &trackerNode{base: prev << nodeShift}
		for w := 0; w < nodeWords; w++ {
			if mm&(1<<w) != 0 {
				nd.mod[w] = binary.LittleEndian.Uint64(p)
				p = p[8:]
			}
		}
		for w := 0; w < nodeWords; w++ {
			if dm&(1<<w) != 0 {
				nd.del[w] = binary.LittleEndian.Uint64(p)
				p = p[8:]
			}
		}
		t.nodes = append(t.nodes, nd)
	}
	return t, p, nil
}

// idSet is a set of proc ids in nodes of nodeIDs bits.
type idSet struct {
	nodes []*setNode // sorted by base, never empty nodes
	// hint and prev are the last two nodes found: lookups alternate
	// between two id ranges (raftfsm's key images and procedures) as often
	// as they stay in one.
	hint, prev int
	n          int
}

type setNode struct {
	base  uint64
	count int
	w     [nodeWords]uint64
}

func (s *idSet) find(base uint64) (int, bool) {
	if s.hint < len(s.nodes) && s.nodes[s.hint].base == base {
		return s.hint, true
	}
	if s.prev < len(s.nodes) && s.nodes[s.prev].base == base {
		s.hint, s.prev = s.prev, s.hint
		return s.hint, true
	}
	i := sort.Search(len(s.nodes), func(i int) bool { return s.nodes[i].base >= base })
	found := i < len(s.nodes) && s.nodes[i].base == base
	if found {
		s.hint, s.prev = i, s.hint
	}
	return i, found
}

func (s *idSet) len() int { return s.n }

func (s *idSet) has(id uint64) bool {
	i, ok := s.find(nodeBase(id))
	if !ok {
		return false
	}
	w, m := bitPos(id)
	return s.nodes[i].w[w]&m != 0
}

// nodeFor returns the node of s covering base, inserted empty if s has
// none yet; the caller adds an id to it.
func (s *idSet) nodeFor(base uint64) *setNode {
	i, ok := s.find(base)
	if !ok {
		s.nodes = append(s.nodes, nil)
		copy(s.nodes[i+1:], s.nodes[i:])
		s.nodes[i] = &setNode{base: base}
	}
	s.hint = i
	return s.nodes[i]
}

func (s *idSet) add(id uint64) {
	nd := s.nodeFor(nodeBase(id))
	w, m := bitPos(id)
	if nd.w[w]&m == 0 {
		nd.w[w] |= m
		nd.count++
		s.n++
	}
}

func (s *idSet) remove(id uint64) {
	i, ok := s.find(nodeBase(id))
	if !ok {
		return
	}
	s.hint = i
	nd := s.nodes[i]
	w, m := bitPos(id)
	if nd.w[w]&m == 0 {
		return
	}
	nd.w[w] &^= m
	nd.count--
	s.n--
	if nd.count == 0 {
		s.nodes = append(s.nodes[:i], s.nodes[i+1:]...)
		s.hint = 0
	}
}

// forEach calls fn for every id in ascending order.
func (s *idSet) forEach(fn func(id uint64)) {
	for _, nd := range s.nodes {
		for w := 0; w < nodeWords; w++ {
			x := nd.w[w]
			for x != 0 {
				b := bits.TrailingZeros64(x)
				x &= x - 1
				fn(nd.base + uint64(w*64+b))
			}
		}
	}
}

// ids returns the members in ascending order.
func (s *idSet) ids() []uint64 {
	out := make([]uint64, 0, s.n)
	s.forEach(func(id uint64) { out = append(out, id) })
	return out
}

// heldSet returns the ids t holds an image of (modified and not deleted).
func heldSet(t *tracker) *idSet {
	s := &idSet{}
	for _, n := range t.nodes {
		nd := &setNode{base: n.base}
		for w := 0; w < nodeWords; w++ {
			nd.w[w] = n.mod[w] &^ n.del[w]
			nd.count += bits.OnesCount64(nd.w[w])
		}
		if nd.count > 0 {
			s.nodes = append(s.nodes, nd)
			s.n += nd.count
		}
	}
	return s
}

// subtractTouched removes every id t touched (modified or deleted).
func (s *idSet) subtractTouched(t *tracker) {
	out := s.nodes[:0]
	j := 0
	for _, nd := range s.nodes {
		for j < len(t.nodes) && t.nodes[j].base < nd.base {
			j++
		}
		if j < len(t.nodes) && t.nodes[j].base == nd.base {
			tn := t.nodes[j]
			c := 0
			for w := 0; w < nodeWords; w++ {
				nd.w[w] &^= tn.mod[w] | tn.del[w]
				c += bits.OnesCount64(nd.w[w])
			}
			s.n -= nd.count - c
			nd.count = c
		}
		if nd.count > 0 {
			out = append(out, nd)
		}
	}
	for i := len(out); i < len(s.nodes); i++ {
		s.nodes[i] = nil
	}
	s.nodes = out
	s.hint = 0
}

// words returns the node of s covering base's ids, or nil.
func (s *idSet) words(base uint64) *[nodeWords]uint64 {
	i, ok := s.find(base)
	if !ok {
		return nil
	}
	return &s.nodes[i].w
}

// addWords adds the ids of ws, the node covering base.
func (s *idSet) addWords(base uint64, ws *[nodeWords]uint64) {
	nd := s.nodeFor(base)
	c := 0
	for w := range nd.w {
		nd.w[w] |= ws[w]
		c += bits.OnesCount64(nd.w[w])
	}
	s.n += c - nd.count
	nd.count = c
}

// addTouched adds every id t touched (modified or deleted).
func (s *idSet) addTouched(t *tracker) {
	var ws [nodeWords]uint64
	for _, n := range t.nodes {
		for w := range ws {
			ws[w] = n.mod[w] | n.del[w]
		}
		s.addWords(n.base, &ws)
	}
}

// addLatest adds the ids whose last word in t is an image (held, when
// deletes is false) or a delete (deletes), unless newer says anything
// about them.
func (s *idSet) addLatest(t *tracker, newer *idSet, deletes bool) {
	var ws [nodeWords]uint64
	for _, n := range t.nodes {
		nw := newer.words(n.base)
		any := uint64(0)
		for w := range ws {
			x := n.mod[w] &^ n.del[w]
			if deletes {
				x = n.del[w]
			}
			if nw != nil {
				x &^= nw[w]
			}
			ws[w] = x
			any |= x
		}
		if any != 0 {
			s.addWords(n.base, &ws)
		}
	}
}

// intersect keeps only the ids o holds too.
func (s *idSet) intersect(o *idSet) {
	out := s.nodes[:0]
	for _, nd := range s.nodes {
		ow := o.words(nd.base)
		c := 0
		for w := range nd.w {
			if ow == nil {
				nd.w[w] = 0
			} else {
				nd.w[w] &= ow[w]
			}
			c += bits.OnesCount64(nd.w[w])
		}
		s.n -= nd.count - c
		nd.count = c
		if c > 0 {
			out = append(out, nd)
		}
	}
	clear(s.nodes[len(out):])
	s.nodes = out
	s.hint = 0
}
