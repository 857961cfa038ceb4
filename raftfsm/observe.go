package raftfsm

import "strings"

// PutObserver is told of the domain key writes the FSM applies under its
// prefixes: a consumer that must see every version of those keys (the
// audit file), where reading the published state later would miss what
// an entry soon after deleted.
type PutObserver struct {
	// Prefixes are the keys observed.
	Prefixes []string
	// Put is called for each put of an observed key, in the order applied,
	// once the state holding it is published (a reader of the state then
	// sees it, unless an entry of the same batch deleted it) and before
	// the next batch is applied. It must not block nor call back into the
	// FSM's writes; value is the FSM's own and must not be modified.
	Put func(key string, value []byte)
	// Restored is called after a snapshot replaced the state: the puts
	// between the old state and the snapshot were never seen, so the
	// observer reads what it needs from the new state.
	Restored func()
}

// Observe adds o; stop removes it. Entries applied before Observe
// returns are not told to it: read them from the state (View).
func (f *FSM) Observe(o *PutObserver) (stop func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observers = append(f.observers, o)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.observers {
			if x == o {
				f.observers = append(f.observers[:i:i], f.observers[i+1:]...)
				return
			}
		}
	}
}

type observedPut struct {
	key   string
	value []byte
}

// observed says an observer wants key; under f.mu.
func (f *FSM) observed(key string) bool {
	for _, o := range f.observers {
		if o.wants(key) {
			return true
		}
	}
	return false
}

func (o *PutObserver) wants(key string) bool {
	for _, p := range o.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// observePuts tells the observers of a batch's puts; under f.mu.
func (f *FSM) observePuts(puts []observedPut) {
	for _, put := range puts {
		for _, o := range f.observers {
			if o.wants(put.key) {
				o.Put(put.key, put.value)
			}
		}
	}
}

// observeRestore tells the observers the state was replaced; under f.mu.
func (f *FSM) observeRestore() {
	for _, o := range f.observers {
		if o.Restored != nil {
			o.Restored()
		}
	}
}
