package store

import (
	"sort"
	"strings"
	"sync"

	"github.com/baton-dev/baton/internal/locked"
)

// MemStore is a Store held in memory. It is safe for concurrent use and
// never loses a write while the process lives; tests use it to simulate a
// crash by building a new executor on the same MemStore.
type MemStore struct {
	mu     sync.Mutex
	procs  map[uint64][]byte
	domain map[string][]byte
	maxID  uint64
	writes int
	closed bool
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{procs: make(map[uint64][]byte), domain: make(map[string][]byte)}
}

var _ MutationStore = (*MemStore)(nil)

// InsertAndMutate implements MutationStore.
func (m *MemStore) InsertAndMutate(proc Proc, children []Proc, muts []Mutation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.insertLocked(proc, children); err != nil {
		return err
	}
	m.applyLocked(muts)
	return nil
}

// UpdateAndMutate implements MutationStore.
func (m *MemStore) UpdateAndMutate(proc Proc, muts []Mutation) error {
	return m.andMutate(func() error { return m.updateLocked(proc) }, muts)
}

// andMutate runs change and, if it succeeds, applies muts, both under one
// hold of m.mu: the two land together or not at all.
func (m *MemStore) andMutate(change func() error, muts []Mutation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := change(); err != nil {
		return err
	}
	m.applyLocked(muts)
	return nil
}

var _ DeleteMutator = (*MemStore)(nil)

// DeleteAndMutate implements DeleteMutator.
func (m *MemStore) DeleteAndMutate(ids []uint64, muts []Mutation) error {
	return m.andMutate(func() error { return m.deleteLocked(ids) }, muts)
}

func (m *MemStore) applyLocked(muts []Mutation) {
	for _, mu := range muts {
		if mu.Delete {
			delete(m.domain, mu.Key)
		} else {
			m.domain[mu.Key] = append([]byte(nil), mu.Value...)
		}
	}
}

// Value implements MutationStore.
func (m *MemStore) Value(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.domain[key]
	return v, ok
}

// ScanValues implements MutationStore.
func (m *MemStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	m.mu.Lock()
	keys := make([]string, 0, len(m.domain))
	for k := range m.domain {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = m.domain[k]
	}
	m.mu.Unlock()
	for i, k := range keys {
		if !fn(k, vals[i]) {
			return
		}
	}
}

// Domain returns a copy of the domain state.
func (m *MemStore) Domain() map[string][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.domain))
	for k, v := range m.domain {
		out[k] = v
	}
	return out
}

// Load implements Store. A MemStore may be loaded any number of times, which
// is what crash tests do.
func (m *MemStore) Load(fn func(Proc) error) (LoadInfo, error) {
	m.mu.Lock()
	ids := make([]uint64, 0, len(m.procs))
	for id := range m.procs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	snapshot := make([]Proc, len(ids))
	for i, id := range ids {
		snapshot[i] = Proc{ID: id, Data: m.procs[id]}
	}
	info := LoadInfo{MaxID: m.maxID, Live: len(ids), Records: len(ids)}
	m.closed = false
	m.mu.Unlock()
	for _, p := range snapshot {
		if err := fn(p); err != nil {
			return info, err
		}
	}
	return info, nil
}

// Insert implements Store.
func (m *MemStore) Insert(proc Proc, children []Proc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.insertLocked(proc, children)
}

func (m *MemStore) insertLocked(proc Proc, children []Proc) error {
	if m.closed {
		return ErrClosed
	}
	if proc.ID == 0 {
		return ErrInvalid
	}
	for _, c := range children {
		if c.ID == 0 {
			return ErrInvalid
		}
	}
	m.put(proc)
	for _, c := range children {
		m.put(c)
	}
	m.writes++
	return nil
}

// Update implements Store.
func (m *MemStore) Update(proc Proc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updateLocked(proc)
}

func (m *MemStore) updateLocked(proc Proc) error {
	if m.closed {
		return ErrClosed
	}
	if proc.ID == 0 {
		return ErrInvalid
	}
	m.put(proc)
	m.writes++
	return nil
}

func (m *MemStore) put(p Proc) {
	m.procs[p.ID] = append([]byte(nil), p.Data...)
	if p.ID > m.maxID {
		m.maxID = p.ID
	}
}

// Delete implements Store.
func (m *MemStore) Delete(ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteLocked(ids)
}

func (m *MemStore) deleteLocked(ids []uint64) error {
	if m.closed {
		return ErrClosed
	}
	for _, id := range ids {
		delete(m.procs, id)
	}
	m.writes++
	return nil
}

// Close implements Store. A closed MemStore keeps its contents and may be
// loaded again.
func (m *MemStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

var _ Reader = (*MemStore)(nil)

// Proc implements Reader.
func (m *MemStore) Proc(id uint64) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.procs[id]
	return b, ok
}

// Len returns the number of live procedures.
func (m *MemStore) Len() int {
	return locked.Call(&m.mu, func() int { return len(m.procs) })
}

// Writes returns the number of successful writes so far.
func (m *MemStore) Writes() int { return locked.Load(&m.mu, &m.writes) }
