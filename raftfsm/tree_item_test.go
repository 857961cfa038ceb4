package raftfsm

import (
	"bytes"
	"testing"
	"unsafe"
)

// An item keeps its own copy of its key and value, which the caller's
// buffers (a decoded Raft entry, reused) may not change afterwards, and a
// value handed out cannot be appended over the next key's bytes.
func TestKVItemOwnsItsBytes(t *testing.T) {
	key, val := []byte("region/default:t1,00001,17"), []byte{1, 3, 0, 5}
	e := newKVItem(key, val, 9)
	key[0], val[0] = 'X', 'X'
	if e.key() != "region/default:t1,00001,17" || !bytes.Equal(e.val(), []byte{1, 3, 0, 5}) || e.walID != 9 {
		t.Fatalf("item = %q %v %d after its sources changed", e.key(), e.val(), e.walID)
	}
	if got := append(e.val(), 7); cap(e.val()) != len(e.val()) || &got[0] == &e.val()[0] {
		t.Fatalf("append to a value wrote into the item (cap %d, len %d)", cap(e.val()), len(e.val()))
	}
	if v := newKVItem("k", nil, 0).val(); v == nil || len(v) != 0 {
		t.Fatalf("empty value = %#v: want empty, not nil", v)
	}
}

var itemSink *kvItem

// An item is 24 bytes (on 64-bit) and one allocation beside its bytes: the state holds
// one per key, a million at a million regions, so a field or an allocation
// more per item is tens of MB on every master.
func TestKVItemSize(t *testing.T) {
	// A pointer, two 32-bit lengths and a 64-bit id: 24 bytes, 20 where
	// pointers are 4.
	if size, want := unsafe.Sizeof(kvItem{}), unsafe.Sizeof(uintptr(0))+16; size != want {
		t.Errorf("kvItem is %d bytes: want %d", size, want)
	}
	key, val := []byte("region/default:t1,00001,17"), []byte{1, 3, 0, 5}
	if allocs := testing.AllocsPerRun(100, func() { itemSink = newKVItem(key, val, 1) }); allocs != 2 {
		t.Errorf("newKVItem makes %v allocations: want 2 (the item, its bytes)", allocs)
	}
}
