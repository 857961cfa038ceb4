package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/scheduler"
)

// lockTable is the optional part of Procedures that shows its scheduler's
// lock table; *procedure.Executor has it.
type lockTable interface {
	Scheduler() *scheduler.Scheduler
}

// lockHolderNamer is the optional part of a Domain that says who holds an
// external lock (cluster/domain's Domain has it).
type lockHolderNamer interface {
	LockHolderOf(info procedure.Info) (catalog.LockHolder, bool)
}

// ListLocks implements adminpb.AdminServer: the leader's lock table, taken
// as one snapshot of the scheduler (its own short lock, never the
// executor's), each party described from its committed record and the
// executor's answer to why it waits. A standby forwards it, STALE
// included: the table lives in the leader's memory only.
func (s *Server) ListLocks(ctx context.Context, req *adminpb.ListLocksRequest) (*adminpb.ListLocksResponse, error) {
	tok, err := pageStart("list locks", lockToken, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	after, err := decodeLockKey(tok)
	if err != nil {
		return nil, err
	}
	size := pageSizeOr(req.GetPageSize(), defaultLocksPage, maxLocksPage)
	return serveLeaderRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListLocksResponse, error) {
		x, err := s.b.Procedures()
		if err != nil {
			return nil, err
		}
		lt, ok := x.(lockTable)
		if !ok {
			return nil, procedure.Errorf(procedure.ErrInvalid, "this node's executor shows no lock table")
		}
		var namer lockHolderNamer
		if d, err := s.domain(); err == nil {
			namer, _ = d.(lockHolderNamer)
		}
		parties := map[uint64]*adminpb.LockParty{}
		party := func(id uint64, mode scheduler.Mode) *adminpb.LockParty {
			p, ok := parties[id]
			if !ok {
				p = s.lockParty(x, namer, id)
				parties[id] = p
			}
			out := proto.Clone(p).(*adminpb.LockParty) // its mode differs per lock
			out.Mode = mode.String()
			return out
		}
		out := &adminpb.ListLocksResponse{Read: ri}
		want := req.GetProcId()
		page := newPage(size)
		var last lockKey
		for _, l := range lt.Scheduler().Locks() {
			if (want != 0 && !lockInvolves(l, want)) || !after.precedes(l) {
				continue
			}
			e := &adminpb.LockEntry{Kind: l.Type.String(), Name: l.Name}
			if l.Exclusive {
				e.Holders = append(e.Holders, party(l.Holder, scheduler.Exclusive))
			}
			for _, id := range l.Shared {
				e.Holders = append(e.Holders, party(id, scheduler.Shared))
			}
			for i, id := range l.Waiters {
				e.Waiters = append(e.Waiters, party(id, l.Modes[i]))
			}
			if !page.fits(clipLockEntry(e)) {
				out.NextPageToken = encodePageToken(lockToken, last.String())
				break
			}
			out.Locks = append(out.Locks, e)
			last = lockKey{l.Type, l.Name}
		}
		return out, nil
	}, relayed(req, adminpb.AdminClient.ListLocks))
}

func lockInvolves(l scheduler.LockInfo, id uint64) bool {
	if l.Exclusive && l.Holder == id {
		return true
	}
	for _, h := range l.Shared {
		if h == id {
			return true
		}
	}
	for _, w := range l.Waiters {
		if w == id {
			return true
		}
	}
	return false
}

// lockParty describes procedure id for the lock table: from its committed
// record where there is one (a procedure is inserted before it can ask for
// a lock, so there almost always is), else from the executor.
func (s *Server) lockParty(x Procedures, namer lockHolderNamer, id uint64) *adminpb.LockParty {
	info, err := s.lockPartyInfo(x, id)
	if err != nil {
		return &adminpb.LockParty{ProcId: id, WaitingFor: "unknown to the executor"}
	}
	p := &adminpb.LockParty{
		ProcId: id, RootId: info.RootID, ParentId: info.ParentID, Type: info.Type, State: info.State.String(),
		WaitingFor: s.whyReason(x, info),
	}
	if namer != nil {
		if h, ok := namer.LockHolderOf(info); ok {
			p.External, p.Holder, p.Description = true, h.Holder, h.Description
		}
	}
	return clipLockParty(p)
}

// lockPartyInfo is procedure id as a party to a lock: its committed
// record, Data included (which names an external lock's holder), where
// there is one, else what the executor knows of it.
func (s *Server) lockPartyInfo(x Procedures, id uint64) (procedure.Info, error) {
	if data, ok := s.b.StoredProcedure(id); ok {
		if info, err := procedure.DecodeInfo(data); err == nil {
			return info, nil
		}
	}
	return x.Get(id)
}

// lockKey is where a page of the lock table ends: the table is sorted by
// lock type, then name.
type lockKey struct {
	typ  scheduler.LockType
	name string
}

func (k lockKey) String() string { return fmt.Sprintf("%d/%s", k.typ, k.name) }

// precedes says whether lock l comes after k (every lock does after the
// zero key, which is where a list starts).
func (k lockKey) precedes(l scheduler.LockInfo) bool {
	if k == (lockKey{}) {
		return true
	}
	return l.Type > k.typ || (l.Type == k.typ && l.Name > k.name)
}

// decodeLockKey reads the key of a lock page token ("" for none).
func decodeLockKey(tok string) (lockKey, error) {
	if tok == "" {
		return lockKey{}, nil
	}
	typ, name, ok := strings.Cut(tok, "/")
	n, err := strconv.Atoi(typ)
	if !ok || err != nil || name == "" {
		return lockKey{}, status.Errorf(codes.InvalidArgument, "admin: list locks: bad page_token (pass next_page_token of the previous page of this list)")
	}
	return lockKey{scheduler.LockType(n), name}, nil
}
