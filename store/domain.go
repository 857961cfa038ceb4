package store

// Mutation is one change to the domain key/value state that some stores
// keep beside procedures (the Raft-replicated store does; the WAL does not).
type Mutation struct {
	Key    string
	Value  []byte // the new value; ignored when Delete is set
	Delete bool
}

// DomainStore is a Store that also keeps a domain key/value state and
// commits changes to it atomically with procedure writes: a procedure
// step's effect is committed if and only if its transition is, so a step
// re-run after a crash never finds its own effect half-applied.
type DomainStore interface {
	Store
	// InsertDomain is Insert plus muts, in one atomic write.
	InsertDomain(proc Proc, children []Proc, muts []Mutation) error
	// UpdateDomain is Update plus muts, in one atomic write.
	UpdateDomain(proc Proc, muts []Mutation) error
	// GetDomain reads the committed value of key.
	GetDomain(key string) ([]byte, bool)
	// ScanDomain calls fn for every committed key with the prefix, in key
	// order, until fn returns false.
	ScanDomain(prefix string, fn func(key string, value []byte) bool)
}
