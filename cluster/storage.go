package cluster

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/locked"
)

// ErrStorageFailed is wrapped by the errors of a node whose local storage
// failed (a full or failing disk): it does not lead and is not ready. The
// error is a *StorageError naming what failed and where.
var ErrStorageFailed = errors.New("cluster: local storage failed")

// StorageError says which of a node's stores failed, at which path, and why.
type StorageError struct {
	What string // "raft log", "raft stable store", "local WAL"
	Path string
	Err  error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("cluster: local storage failed: %s %s: %v", e.What, e.Path, e.Err)
}

// Unwrap returns ErrStorageFailed and the cause.
func (e *StorageError) Unwrap() []error { return []error{ErrStorageFailed, e.Err} }

// storageRetryInterval is how often a stable-store write that failed is
// tried again (see guardedStable).
const storageRetryInterval = time.Second

// storageFault is one store's current failure: set when a write fails,
// cleared when a later write succeeds. It logs each change once.
type storageFault struct {
	what, path string
	log        hclog.Logger
	cur        atomic.Pointer[StorageError]

	mu       sync.Mutex
	lastSaid time.Time // when a failure was last logged at ERROR
}

// storageQuiet is how long after a failure was logged a new failure of the
// same store (a disk that is full, then takes one small write, then is
// full again) is logged at DEBUG only: one clear line, not a stream.
const storageQuiet = time.Minute

func (s *storageFault) get() error {
	if e := s.cur.Load(); e != nil {
		return e
	}
	return nil
}

func (s *storageFault) observe(err error) {
	if err == nil {
		if s.cur.Swap(nil) != nil {
			s.log.Debug("local storage writes succeed again", "store", s.what, "path", s.path)
		}
		return
	}
	e := &StorageError{What: s.what, Path: s.path, Err: err}
	if s.cur.Swap(e) != nil {
		return
	}
	s.mu.Lock()
	quiet := !s.lastSaid.IsZero() && time.Since(s.lastSaid) < storageQuiet
	if !quiet {
		s.lastSaid = time.Now()
	}
	s.mu.Unlock()
	if quiet {
		s.log.Debug("local storage failed again", "store", s.what, "path", s.path, "error", err)
		return
	}
	s.log.Error("local storage failed: not leading and not ready while it fails",
		"store", s.what, "path", s.path, "error", err)
}

// guardedLogs wraps raft's log store to notice write failures. Raft itself
// handles them: a leader whose log write fails answers the writes with the
// error and steps down; a follower refuses the AppendEntries, so nothing it
// could not store counts towards a commit.
// It also measures what it stores, for the log's byte budget (logbudget.go).
type guardedLogs struct {
	raft.LogStore
	fault *storageFault
	meter *logMeter
}

func (g *guardedLogs) StoreLog(l *raft.Log) error {
	err := g.LogStore.StoreLog(l)
	g.fault.observe(err)
	if err == nil {
		g.meter.add(l)
	}
	return err
}

func (g *guardedLogs) StoreLogs(ls []*raft.Log) error {
	err := g.LogStore.StoreLogs(ls)
	g.fault.observe(err)
	if err == nil {
		g.meter.add(ls...)
	}
	return err
}

func (g *guardedLogs) DeleteRange(lo, hi uint64) error {
	err := g.LogStore.DeleteRange(lo, hi)
	g.fault.observe(err)
	return err
}

// guardedStable wraps raft's stable store (current term, vote). Raft
// panics when it cannot persist a new term ("failed to save current
// term"), which on a full disk means a crash on every term change, and
// after a restart on a disk that is still full, a crash loop. A write
// that fails is therefore retried every storageRetryInterval until it
// succeeds: the raft goroutine making it waits, so the node neither votes
// nor acknowledges entries meanwhile (which is safe: it is merely
// unavailable), and it carries on in place once space is freed. A write is
// never reported done when it was not, since a term or vote forgotten
// across a restart could elect two leaders in one term. Once the node
// shuts down, a write still failing waits for good (see Node.close).
type guardedStable struct {
	raft.StableStore
	fault *storageFault
	stop  <-chan struct{}

	armed atomic.Bool // raft runs: retry failed writes (before, return them)

	mu    sync.Mutex
	stuck bool // a write waits for the disk after shutdown began
}

// arm makes failed writes wait for the disk from now on. Until then (while
// NewNode bootstraps) a failure is returned, so a node that cannot write
// its first term fails to start instead of hanging.
func (g *guardedStable) arm() { g.armed.Store(true) }

func (g *guardedStable) retry(op func() error) error {
	for {
		err := op()
		g.fault.observe(err)
		if err == nil || !g.armed.Load() {
			return err
		}
		select {
		case <-g.stop:
			g.mu.Lock()
			g.stuck = true
			g.mu.Unlock()
			select {} // see the type's comment
		case <-time.After(storageRetryInterval):
		}
	}
}

func (g *guardedStable) isStuck() bool { return locked.Load(&g.mu, &g.stuck) }

func (g *guardedStable) Set(k, v []byte) error {
	return g.retry(func() error { return g.StableStore.Set(k, v) })
}

func (g *guardedStable) SetUint64(k []byte, v uint64) error {
	return g.retry(func() error { return g.StableStore.SetUint64(k, v) })
}

// StorageErr returns the node's local storage failure, or nil: a failing
// raft log or stable store (until a write succeeds again), or the FSM's
// local WAL (sticky until restart). A node with a storage failure does not
// lead (it gives leadership away and refuses to establish it) and is not
// ready; see the package documentation, Storage failures.
func (n *Node) StorageErr() error {
	if n.logFault != nil {
		if err := n.logFault.get(); err != nil {
			return err
		}
	}
	if n.stableFault != nil {
		if err := n.stableFault.get(); err != nil {
			return err
		}
	}
	if err := n.fsm.WALErr(); err != nil {
		return &StorageError{What: "local WAL", Path: n.fsmDir, Err: err}
	}
	return nil
}
