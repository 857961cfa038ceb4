package domain

import (
	"context"
	"time"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
)

// This file lends the external tests (package domain_test, which run on
// cluster/clustertest, a package that imports this one) the internals
// they assert on. It is compiled into the tests only: nothing here is
// API.

// Reader reads the replicated layout (an FSM's Get and Scan).
type Reader = reader

// Services are a term's leader services.
type Services = services

// NewReader reads through get and scan, as the domain reads an FSM.
func NewReader(get func(string) ([]byte, bool), scan func(prefix string, fn func(key string, val []byte) bool)) Reader {
	return kvReader{Get: get, Scan: scan}
}

var (
	GetTable        = getTable
	GetRegion       = getRegion
	GetServer       = getServer
	ScanRegions     = scanRegions
	ScanTables      = scanTables
	NamespaceExists = namespaceExists
	MustJSON        = mustJSON
)

// TableRegionNames lists the regions of table full, whose record is t.
func TableRegionNames(t Table, full string) []string { return t.regionNames(full) }

// ReaderGet is r's raw read of key.
func ReaderGet(r Reader, key string) ([]byte, bool, error) { return r.get(key) }

// Services returns the current term's leader services, or nil.
func (d *Domain) Services() *Services { return d.services() }

// RegisterServer calls d's Master service directly, past the gRPC server
// and its fault injector.
func RegisterServer(ctx context.Context, d *Domain, req *rspb.RegisterServerRequest) (*rspb.RegisterServerResponse, error) {
	return (&masterService{d: d, grants: func() *rspb.AccessGrants { return noAccessControl }}).RegisterServer(ctx, req)
}

func (s *services) DispatchStats() dispatch.Stats { return s.disp.Stats() }

func (s *services) SubmitCrash(ref ServerRef, why string) { s.submitCrash(ref, why) }

func (s *services) Commit(ctx context.Context, muts ...raftfsm.Mutation) error {
	return s.commit(ctx, muts...)
}

// ResetStartSeq starts the start-code counter over, as services rebuilt
// for the same term would.
func (s *services) ResetStartSeq() {
	s.mu.Lock()
	s.startSeq = 0
	s.mu.Unlock()
}

func (s *services) StartedAt() time.Time { return s.startedAt }

func (s *services) Revoked(ref ServerRef) bool { return s.revoked(ref) }

func (s *services) LiveTargets(r Reader) (map[string]Server, error) { return s.liveTargets(r) }

// OnServer reports whether r is recorded on the incarnation ref.
func (r Region) OnServer(ref ServerRef) bool { return r.onServer(ref) }

// LockLeaseLength is the length of lock id's lease on this leader, or 0
// if it has none.
func (s *services) LockLeaseLength(id uint64) time.Duration {
	l, _ := s.lockLeases.Length(lockHolder(id))
	return l
}

// LockWaitEntries counts the lock wait states this leader keeps.
func (s *services) LockWaitEntries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.locks)
}

// RegionBudgetState is what the term's region budget holds: places in
// flight, tables queued, tables holding places, tables with a ticket.
func (s *services) RegionBudgetState() (inFlight, queued, holds, tickets int) {
	b := s.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight, len(b.queue), len(b.holds), len(b.tickets)
}

// DecodeRegion reads a region record as stored (JSON, or the compact
// encoding of format 2).
func DecodeRegion(name string, v []byte) (Region, error) { return decodeRegion(name, v) }
