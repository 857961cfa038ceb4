package store

// Mutation is one change to the domain key/value state that some stores
// keep beside procedures (the Raft-replicated store does; the WAL does not).
type Mutation struct {
	Key    string
	Value  []byte // the new value; ignored when Delete is set
	Delete bool
}

// MutationStore is a Store whose inserts and updates can also apply
// Mutations to a key/value state it keeps, in the same atomic write: a
// procedure step's effect is committed if and only if its transition is, so
// a step re-run after a crash never finds its own effect half-applied.
type MutationStore interface {
	Store
	// InsertAndMutate is Insert plus muts, in one atomic write.
	InsertAndMutate(proc Proc, children []Proc, muts []Mutation) error
	// UpdateAndMutate is Update plus muts, in one atomic write.
	UpdateAndMutate(proc Proc, muts []Mutation) error
	// Value reads the committed value of key.
	Value(key string) ([]byte, bool)
	// ScanValues calls fn for every committed key with the prefix, in key
	// order, until fn returns false.
	ScanValues(prefix string, fn func(key string, value []byte) bool)
}

// DeleteMutator is a MutationStore that can also delete procedures with
// Mutations in one atomic write: the last write of a procedure that is
// forgotten as it finishes (its effect, and its record gone) commits
// whole or not at all. Stores without it keep such a procedure's record
// until its root ends.
type DeleteMutator interface {
	MutationStore
	// DeleteAndMutate is Delete plus muts, in one atomic write.
	DeleteAndMutate(ids []uint64, muts []Mutation) error
}

// LateMutator is a MutationStore whose insert can carry Mutations made as
// its write is committed, not before: the store asks late for them at the
// point that fixes the write's order among the others (a replicated
// store: as it hands the write's entry to the log), so that what late
// numbers commits in the order numbered (the admin API's audit record of
// the submission it commits with).
type LateMutator interface {
	MutationStore
	// InsertAndMutateLate is Insert plus the mutations late gives, in one
	// atomic write. late is called at most once, and not if the write
	// fails before it is ordered; it must not block.
	InsertAndMutateLate(proc Proc, children []Proc, late func() []Mutation) error
}
