package raftfsm

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/raftpb"
)

// TestKVImageIsProtoMarshal checks the hand-built WAL image of a key
// against proto.Marshal of raftpb.KV, which wrote it before and which
// every release reads back: the bytes must not change.
func TestKVImageIsProtoMarshal(t *testing.T) {
	long := []byte(strings.Repeat("x", 300)) // a two-byte length
	for _, kv := range []struct{ key, value []byte }{
		{[]byte("regions/default:t,00001,7"), []byte(`{"state":"OPEN"}`)},
		{[]byte("k"), nil},
		{nil, []byte("v")},
		{nil, nil},
		{long, long},
		{[]byte("k"), []byte{}},
	} {
		want, err := proto.Marshal(&raftpb.KV{Key: kv.key, Value: kv.value})
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("before")
		got := appendKVImage(append([]byte(nil), prefix...), kv.key, kv.value)
		if !bytes.Equal(got[len(prefix):], want) || !bytes.Equal(got[:len(prefix)], prefix) {
			t.Errorf("key %q value %q: image %x, want %x after the prefix", kv.key, kv.value, got, want)
		}
		if n := kvImageSize(kv.key, kv.value); n != len(want) {
			t.Errorf("key %q value %q: size %d, want %d", kv.key, kv.value, n, len(want))
		}
	}
}
