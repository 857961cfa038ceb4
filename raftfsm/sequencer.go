package raftfsm

import "sync"

// Sequencer orders the proposals of entries that carry what their writer
// numbers in the order it must commit: the audit trail's records
// (audit/<term>-<n>), which a reader pages through by number and must
// never find committed past one yet to commit. Raft commits entries in
// the order they reach raft.Apply; so a writer numbers and hands its entry
// to raft.Apply inside Do, and every path proposing such entries on a
// node (its RaftStores' committers, its direct domain writes) shares the
// node's one Sequencer. Entries carrying nothing numbered do not take it.
type Sequencer struct{ mu sync.Mutex }

// Do runs fn holding the sequencer: fn numbers what it writes and calls
// raft.Apply (which returns once raft took the entry, not once it
// committed), nothing slower.
func (q *Sequencer) Do(fn func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	fn()
}
