package store

import (
	"math/bits"
	"slices"
)

// sizeMap maps each live id to the encoded size of its latest image: what
// keeps the WAL's LiveBytes exact across overwrites and deletes. It is a
// map of 64-id blocks, each a presence bitmap and the sizes of the present
// ids packed in id order, because the ids it holds are mostly dense runs
// (procedure ids are assigned in order, and raftfsm numbers its key images
// sequentially): a full block costs about 5 bytes per id where a
// map[uint64]uint32 costs 20 to 40, and a block holding a single id about
// 80 bytes, twice the map's.
type sizeMap struct {
	blocks map[uint64]*sizeBlock // by id / 64
	n      int
}

type sizeBlock struct {
	present uint64   // bit i: id block*64+i is live
	sizes   []uint32 // one per present bit, in bit order
}

func newSizeMap() *sizeMap { return &sizeMap{blocks: map[uint64]*sizeBlock{}} }

// len returns the number of ids held.
func (m *sizeMap) len() int { return m.n }

// locate returns id's block (nil if none), its bit and its index in the
// block's sizes (where it is or would be).
func (m *sizeMap) locate(id uint64) (*sizeBlock, uint64, int) {
	b := m.blocks[id>>6]
	bit := uint64(1) << (id & 63)
	if b == nil {
		return nil, bit, 0
	}
	return b, bit, bits.OnesCount64(b.present & (bit - 1))
}

// set sets id's size and returns the size it replaces (0 if none).
func (m *sizeMap) set(id uint64, size uint32) (old uint32) {
	b, bit, i := m.locate(id)
	if b == nil {
		b = &sizeBlock{}
		m.blocks[id>>6] = b
	}
	if b.present&bit != 0 {
		old, b.sizes[i] = b.sizes[i], size
		return old
	}
	b.present |= bit
	b.sizes = slices.Insert(b.sizes, i, size)
	m.n++
	return 0
}

// remove removes id and returns its size, and whether it was held.
func (m *sizeMap) remove(id uint64) (uint32, bool) {
	b, bit, i := m.locate(id)
	if b == nil || b.present&bit == 0 {
		return 0, false
	}
	size := b.sizes[i]
	b.present &^= bit
	b.sizes = slices.Delete(b.sizes, i, i+1)
	if b.present == 0 {
		delete(m.blocks, id>>6)
	}
	m.n--
	return size, true
}

// sumWord returns the sizes of the ids of word, the 64 ids from base (a
// multiple of 64), that m holds.
func (m *sizeMap) sumWord(base, word uint64) int64 {
	b := m.blocks[base>>6]
	if b == nil {
		return 0
	}
	var sum int64
	for x := word & b.present; x != 0; x &= x - 1 {
		bit := x & -x
		sum += int64(b.sizes[bits.OnesCount64(b.present&(bit-1))])
	}
	return sum
}

// sumSet returns the sizes of the ids of s that m holds.
func (m *sizeMap) sumSet(s *idSet) int64 {
	var sum int64
	for _, nd := range s.nodes {
		for w, x := range nd.w {
			if x != 0 {
				sum += m.sumWord(nd.base+uint64(w*64), x)
			}
		}
	}
	return sum
}
