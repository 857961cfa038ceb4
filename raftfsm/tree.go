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
// before its key and value. Here a key costs one 24-byte item (a pointer to
// its key and value, their lengths and its WAL id) and one allocation
// holding the key's and the value's bytes, plus its share of the nodes
// (BenchmarkFSMHeap: 203 bytes of heap per region of 150 bytes of key and
// value; 227 with a 48-byte item and the key and the value apart, 558 with
// the radix trees).
//
// Items are pointers, not values: a node then copies 8 bytes per item on a
// copy-on-write and keeps its spare capacity small, which the nodes of a
// B-tree filled in key order (half full after every split) would otherwise
// waste (inline items measured about 35 bytes more per key). Items are
// never modified once published, since older versions share them: a put
// inserts a new item.

import (
	"strings"
	"unsafe"

	"github.com/google/btree"
)

// treeDegree is the B-tree's degree: nodes hold up to 2*degree-1 items. 32
// keeps the paths short (four levels hold a million keys) while a node
// copied on write stays at half a KiB of pointers.
const treeDegree = 32

// kvItem is a domain key and its value in the state; walID is the local
// WAL id of its image and is not part of the replicated state.
//
// The key and the value share one allocation that data points to, never
// modified once made: region records are the state's most numerous keys,
// and a key string, a value slice and a 48-byte item apart cost 120 bytes
// a region where this costs 88 (at a million regions, 32 MB less live
// heap on every master, about three times that in RSS at GOGC 200;
// issue 33).
type kvItem struct {
	data  *byte // the key's bytes, then the value's; nil only if both are empty
	klen  uint32
	vlen  uint32
	walID uint64
}

// newKVItem is the item of key and val, copied into one allocation. A key
// or value cannot reach 4 GiB: a Raft entry carries them.
func newKVItem[K string | []byte](key K, val []byte, walID uint64) *kvItem {
	buf := make([]byte, 0, len(key)+len(val))
	buf = append(append(buf, key...), val...)
	return &kvItem{data: unsafe.SliceData(buf), klen: uint32(len(key)), vlen: uint32(len(val)), walID: walID}
}

// keyProbe is an item to look key up with; it shares key's bytes.
func keyProbe(key string) *kvItem {
	return &kvItem{data: unsafe.StringData(key), klen: uint32(len(key))}
}

// key is the item's key; it shares the item's bytes, which never change.
func (e *kvItem) key() string { return unsafe.String(e.data, e.klen) }

// val is the item's value, which the caller must not modify. Its capacity
// is its length, so an append copies it instead of writing past it.
func (e *kvItem) val() []byte {
	if e.vlen == 0 {
		// Not a pointer past the allocation's end: an empty, non-nil value.
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e.data), e.klen)), e.vlen)
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
	return btree.NewG(treeDegree, func(a, b *kvItem) bool { return a.key() < b.key() })
}

func newProcTree() *procTree {
	return btree.NewG(treeDegree, func(a, b *procItem) bool { return a.id < b.id })
}

// getKV returns the item of key.
func getKV(t *kvTree, key string) (*kvItem, bool) { return t.Get(keyProbe(key)) }

// getProc returns the item of procedure id.
func getProc(t *procTree, id uint64) (*procItem, bool) { return t.Get(&procItem{id: id}) }

// scanKVBefore calls fn for the keys starting with prefix and less than
// before ("": all of them), newest first, until fn returns false.
func scanKVBefore(t *kvTree, prefix, before string, fn func(*kvItem) bool) {
	pivot := before
	if pivot == "" {
		pivot = prefix + "\xff" // above every key with prefix: no UTF-8 byte is 0xff
	}
	t.DescendLessOrEqual(keyProbe(pivot), func(it *kvItem) bool {
		if it.key() == before {
			return true
		}
		return strings.HasPrefix(it.key(), prefix) && fn(it)
	})
}

// scanKV calls fn for the keys starting with prefix and greater than or
// equal to from (from >= prefix), in order, until fn returns false.
func scanKV(t *kvTree, prefix, from string, fn func(*kvItem) bool) {
	t.AscendGreaterOrEqual(keyProbe(from), func(it *kvItem) bool {
		return strings.HasPrefix(it.key(), prefix) && fn(it)
	})
}
