package domain

import (
	"bytes"
	"sync"
)

// serverRecords decodes server records, reusing the decoding of a value
// it saw last time for the same key. Every assignment reads every server
// record (liveTargets) and its target's (presenceOf); the records change
// only when a server registers or expires, and decoding them as JSON was
// the largest cost of a region's assignment.
type serverRecords struct {
	mu sync.Mutex
	m  map[string]decodedServer
}

type decodedServer struct {
	raw []byte
	srv Server
}

// maxServerRecords bounds the cache; past it the cache starts over.
const maxServerRecords = 1 << 14

func (c *serverRecords) decode(key string, v []byte) (Server, error) {
	c.mu.Lock()
	d, ok := c.m[key]
	c.mu.Unlock()
	if ok && bytes.Equal(d.raw, v) {
		return d.srv, nil
	}
	s, err := decodeServer(key, v)
	if err != nil {
		return Server{}, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxServerRecords {
		c.m = map[string]decodedServer{}
	}
	c.m[key] = decodedServer{raw: bytes.Clone(v), srv: s}
	c.mu.Unlock()
	return s, nil
}

// get is getServer through the cache.
func (c *serverRecords) get(r reader, id string) (Server, bool, error) {
	key := ServerKey(id)
	v, ok, err := r.get(key)
	if err != nil || !ok {
		return Server{}, false, err
	}
	s, err := c.decode(key, v)
	return s, err == nil, err
}

// scan is scanServers through the cache.
func (c *serverRecords) scan(r reader) (map[string]Server, error) {
	return scanServersWith(r, c.decode)
}
