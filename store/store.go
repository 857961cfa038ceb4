// Package store persists procedures for the executor in package procedure.
//
// A Store keeps the latest serialised image of every live procedure, keyed by
// procedure id. The executor writes through four calls: Insert (a procedure
// together with the children it spawned, atomically), Update, Delete and, once
// at start, Load. The store treats the image as opaque bytes; only the id is
// meaningful to it.
//
// Two implementations live here: MemStore, for tests and for users who do not
// need durability, and WAL, a rolling write-ahead log of segment files modelled
// on HBase's WALProcedureStore (see wal.go for its design). The Raft-replicated
// store of package raftfsm implements the same interface.
//
// The WAL's cleanup copies long-lived procedures forward so old segments can
// go, and appends pay for that copying: it writes at most 1.5 bytes per byte
// appended, and an idle WAL writes nothing. WALConfig.MaxSegments is
// therefore a soft limit: when the live procedures need more segments, the
// WAL keeps them (and logs a warning once); under a steady workload the
// number of segments stays bounded either way.
package store

import (
	"errors"
	"fmt"
)

// Proc is the persisted image of one procedure.
type Proc struct {
	// ID is the procedure id; never 0.
	ID uint64
	// Data is the serialised procedure. Stores may keep a reference to it, so
	// callers must not modify it after handing it over; readers must not
	// modify the slices they are given.
	Data []byte
}

// LoadInfo summarises what Load found.
type LoadInfo struct {
	// MaxID is the highest procedure id the store has ever seen, including ids
	// of procedures since deleted. The executor resumes id assignment above it
	// so ids stay monotonic across restarts.
	MaxID uint64
	// Index is the highest external index (see Batch.Index) of any record
	// loaded, or 0 if none carried one.
	Index uint64
	// Live is the number of procedures passed to the visitor.
	Live int
	// Records is the number of records read.
	Records int
	// Corruptions lists damage found and tolerated while loading. Loading a
	// store with corruptions does not fail: everything readable is returned
	// and the damaged files are kept on disk for inspection.
	Corruptions []Corruption
}

// Corruption describes one damaged place in a store.
type Corruption struct {
	File   string // file name, or "" for stores without files
	Offset int64  // byte offset of the damaged record or header
	Reason string
}

// String says where the damage is and what it is: file@offset: reason.
func (c Corruption) String() string {
	return fmt.Sprintf("%s@%d: %s", c.File, c.Offset, c.Reason)
}

// Store is the executor's persistence.
//
// All methods may be called concurrently, except Load, which is called once,
// before any write. A write that returns nil is durable (as durable as the
// implementation promises); a write that returns an error may or may not have
// been persisted, and the executor treats the store as failed from then on.
type Store interface {
	// Load calls fn once for every live procedure, in ascending id order,
	// with the image last written for it. An error from fn stops the load
	// and is returned.
	Load(fn func(Proc) error) (LoadInfo, error)
	// Insert persists proc and its children in one atomic write: after a
	// crash either all of them load or none does. Children may be empty.
	Insert(proc Proc, children []Proc) error
	// Update persists a new image of an existing procedure.
	Update(proc Proc) error
	// Delete removes the procedures with the given ids in one atomic write.
	Delete(ids []uint64) error
	// Close releases the store. Writes after Close fail with ErrClosed.
	Close() error
}

// Reader is a Store that reads back the image last written for one
// procedure. The executor keeps little of a finished procedure in memory
// and reads the rest back from a Reader; with a store that is not one, it
// keeps each finished procedure's last image itself.
type Reader interface {
	// Proc returns the image last written for procedure id, if it is
	// live. The caller must not modify it.
	Proc(id uint64) ([]byte, bool)
}

var (
	// ErrClosed is returned by writes to a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrNotLoaded is returned by writes before Load.
	ErrNotLoaded = errors.New("store: write before Load")
	// ErrInvalid is returned for a write that breaks the contract (id 0).
	ErrInvalid = errors.New("store: invalid write")
)
