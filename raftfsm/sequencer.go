package raftfsm

import (
	"strings"
	"sync"
)

// Sequencer orders the proposals of entries that carry what their writer
// numbers in the order it must commit: the audit trail's records
// (audit/<term>-<n>), which a reader pages through by number and must
// never find committed past one yet to commit. Raft commits entries in
// the order they reach raft.Apply; so a writer numbers and hands its entry
// to raft.Apply inside Do, and every path proposing such entries on a
// node (its RaftStores' committers, its direct domain writes) shares the
// node's one Sequencer. Entries carrying nothing numbered do not take it.
//
// A Sequencer may also hold a Folder, which a RaftStore asks, as it
// proposes an entry, to turn the placeholders its writes' Late mutations
// hold into the entry's real mutations: what one entry carries can then be
// numbered and written together (the audit records of one entry's
// submissions, as one key), knowing which writes the entry carries.
type Sequencer struct {
	mu     sync.Mutex
	folder *Folder // under mu
}

// Do runs fn holding the sequencer: fn numbers what it writes and calls
// raft.Apply (which returns once raft took the entry, not once it
// committed), nothing slower.
func (q *Sequencer) Do(fn func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	fn()
}

// PlaceholderPrefix starts the key of a placeholder: a Put, from a
// write's Late, that the Sequencer's Folder turns into mutations; it is
// never written itself. No domain key starts with a NUL byte.
const PlaceholderPrefix = "\x00placeholder/"

// Folder turns placeholders into mutations. Fold runs under the
// Sequencer, once for each entry whose writes hold placeholders, with
// their keys in the order of the writes, only those of the writes the
// entry carries (a write whose Late failed is not among them). Its
// mutations commit in that entry, all or nothing with the writes; done (if
// not nil) is called with the entry's outcome once it is known (nil:
// applied), or with the error that kept it from being proposed. An error
// from Fold fails every write of the entry. Fold must not block.
type Folder struct {
	Fold func(keys []string) (muts []Mutation, done func(error), err error)
}

// SetFolder makes f the folder of the entries proposed under q (nil:
// none; a placeholder then fails its write).
func (q *Sequencer) SetFolder(f *Folder) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.folder = f
}

// placeholders takes the placeholders out of muts and returns them apart.
func placeholders(muts []Mutation) (rest []Mutation, keys []string) {
	rest = muts
	for i, m := range muts {
		if m.Op == OpPut && strings.HasPrefix(m.Key, PlaceholderPrefix) {
			if keys == nil {
				rest = append([]Mutation(nil), muts[:i]...)
			}
			keys = append(keys, m.Key)
			continue
		}
		if keys != nil {
			rest = append(rest, m)
		}
	}
	return rest, keys
}
