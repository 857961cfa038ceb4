package raftfsm

// The state's persistent trees.
//
// Both halves of the state are copy-on-write B-trees (google/btree): Clone
// is O(1) and marks every node shared, so the next version copies only the
// nodes on the paths it changes, and the original and the clone may be
// used concurrently once Clone has returned — readers of a published
// version never lock. The only writer is ApplyBatch (or a load or restore
// building a version nobody sees yet), under the FSM's mutex, which also
// keeps Clone from being called concurrently, as google/btree requires.
//
// They replaced go-immutable-radix, which spends a node, a leaf and a
// mutation channel on every key: about 380 bytes of structure per region
// before its key and value. Here a key costs one 48-byte item (key, value
// and WAL id) plus its share of the nodes, about 80 bytes in all
// (BenchmarkFSMHeap: 227 bytes of heap per region of 150 bytes of key and
// value, against 558 with the radix trees).
//
// Items are pointers, not values: a node then copies 8 bytes per item on a
// copy-on-write and keeps its spare capacity small, which the nodes of a
// B-tree filled in key order (half full after every split) would otherwise
// waste (inline items measured about 35 bytes more per key). Items are
// never modified once published, since older versions share them: a put
// inserts a new item.

import (
	"strings"

	"github.com/google/btree"
)

// treeDegree is the B-tree's degree: nodes hold up to 2*degree-1 items. 32
// keeps the paths short (four levels hold a million keys) while a node
// copied on write stays at half a KiB of pointers.
const treeDegree = 32

// kvItem is a domain key in the state; walID is the local WAL id of its
// image and is not part of the replicated state.
type kvItem struct {
	key   string
	val   []byte
	walID uint64
}

// procItem is a live procedure.
type procItem struct {
	id   uint64
	data []byte
}

type (
	kvTree   = btree.BTreeG[*kvItem]
	procTree = btree.BTreeG[*procItem]
)

func newKVTree() *kvTree {
	return btree.NewG(treeDegree, func(a, b *kvItem) bool { return a.key < b.key })
}

func newProcTree() *procTree {
	return btree.NewG(treeDegree, func(a, b *procItem) bool { return a.id < b.id })
}

// getKV returns the item of key.
func getKV(t *kvTree, key string) (*kvItem, bool) { return t.Get(&kvItem{key: key}) }

// getProc returns the item of procedure id.
func getProc(t *procTree, id uint64) (*procItem, bool) { return t.Get(&procItem{id: id}) }

// scanKVBefore calls fn for the keys starting with prefix and less than
// before ("": all of them), newest first, until fn returns false.
func scanKVBefore(t *kvTree, prefix, before string, fn func(*kvItem) bool) {
	pivot := before
	if pivot == "" {
		pivot = prefix + "\xff" // above every key with prefix: no UTF-8 byte is 0xff
	}
	t.DescendLessOrEqual(&kvItem{key: pivot}, func(it *kvItem) bool {
		if it.key == before {
			return true
		}
		return strings.HasPrefix(it.key, prefix) && fn(it)
	})
}

// scanKV calls fn for the keys starting with prefix and greater than or
// equal to from (from >= prefix), in order, until fn returns false.
func scanKV(t *kvTree, prefix, from string, fn func(*kvItem) bool) {
	t.AscendGreaterOrEqual(&kvItem{key: from}, func(it *kvItem) bool {
		return strings.HasPrefix(it.key, prefix) && fn(it)
	})
}
