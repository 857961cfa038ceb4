package admin

import (
	"fmt"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

// Procedure reads answer from the local FSM's records, never from the
// executor's memory: the executor changes a procedure in memory before the
// change commits (a step's outcome, SUCCESS itself), and a reader shown an
// uncommitted SUCCESS could see the procedure RUNNABLE again after a
// failover, or even ROLLEDBACK. What the executor alone knows and no
// outcome depends on (what a live procedure waits for, its children) is
// taken from it when it runs here.

// storedProc returns procedure id as committed. x is the executor, or nil
// on a node without one.
func (s *Server) storedProc(x Procedures, id uint64) (*adminpb.Procedure, error) {
	p, _, err := s.storedProcInfo(x, id)
	return p, err
}

// storedProcInfo is storedProc, with the decoded record (Data included).
func (s *Server) storedProcInfo(x Procedures, id uint64) (*adminpb.Procedure, procedure.Info, error) {
	data, ok := s.b.StoredProcedure(id)
	if !ok {
		return nil, procedure.Info{}, procedure.Errorf(procedure.ErrNotFound, "procedure %d does not exist", id)
	}
	info, err := procedure.DecodeInfo(data)
	if err != nil {
		return nil, procedure.Info{}, fmt.Errorf("admin: procedure %d: %w", id, err)
	}
	if x != nil {
		info.Children = s.committedChildren(x, info)
		// How far it is lives in the executor, not in the record.
		if live, err := x.Get(id); err == nil {
			info.Progress = live.Progress
		}
		return toProto(info, s.whyReason(x, info)), info, nil
	}
	info.Children, err = s.scanChildren(id)
	if err != nil {
		return nil, procedure.Info{}, err
	}
	return toProto(info, ""), info, nil
}

// committedChildren lists the children the executor knows of info whose
// insert committed: the executor lists only those (procedure.Info's
// Children). Asking the store which of them it holds would miss those a
// procedure forgets as they succeed (procedure.ForgetsChildren), whose
// records are gone while their parent runs.
func (s *Server) committedChildren(x Procedures, info procedure.Info) []uint64 {
	live, err := x.Get(info.ID)
	if err != nil {
		return nil
	}
	return live.Children
}

// scanChildren finds id's children among the stored procedures (a child's
// id is above its parent's).
func (s *Server) scanChildren(id uint64) ([]uint64, error) {
	var out []uint64
	err := s.b.StoredProceduresAfter(id, func(p store.Proc) error {
		sum, err := procedure.DecodeSummary(p.Data)
		if err != nil {
			return fmt.Errorf("admin: procedure %d: %w", p.ID, err)
		}
		if sum.ParentID == id {
			out = append(out, p.ID)
		}
		return nil
	})
	return out, err
}

// storedProceduresBefore is the optional part of a Backend that walks the
// stored procedures newest first (NodeBackend has it).
type storedProceduresBefore interface {
	// StoredProceduresBefore walks those with an id below before, in
	// descending id order.
	StoredProceduresBefore(before uint64, fn func(store.Proc) error) error
}

// storedProcs lists the committed procedures matching f (AfterID, Limit
// included), for ListProcedures; newestFirst lists those below beforeID
// in descending id order instead. Records are matched on their Summary,
// so a page that scans many to fill itself decodes only those it lists.
func (s *Server) storedProcs(x Procedures, f procedure.Filter, newestFirst bool, beforeID uint64) ([]*adminpb.Procedure, error) {
	var infos []procedure.Info
	visit := func(p store.Proc) error {
		sum, err := procedure.DecodeSummary(p.Data)
		if err != nil {
			return fmt.Errorf("admin: procedure %d: %w", p.ID, err)
		}
		if !f.MatchSummary(sum) {
			return nil
		}
		info, err := procedure.DecodeInfo(p.Data)
		if err != nil {
			return fmt.Errorf("admin: procedure %d: %w", p.ID, err)
		}
		info.Data = nil // not part of a listing
		infos = append(infos, info)
		if len(infos) == f.Limit {
			return errPageFull
		}
		return nil
	}
	var err error
	if newestFirst {
		sb, ok := s.b.(storedProceduresBefore)
		if !ok {
			return nil, procedure.Errorf(procedure.ErrInvalid, "this node cannot list procedures newest first")
		}
		err = sb.StoredProceduresBefore(beforeID, visit)
	} else {
		err = s.b.StoredProceduresAfter(f.AfterID, visit)
	}
	if err != nil && err != errPageFull {
		return nil, err
	}
	var byParent map[uint64][]uint64
	if x == nil && len(infos) > 0 {
		// No executor here: one scan finds every listed procedure's
		// children (a child's id is above its parent's).
		lowest := infos[0].ID
		for _, info := range infos {
			lowest = min(lowest, info.ID)
		}
		byParent = map[uint64][]uint64{}
		if err := s.b.StoredProceduresAfter(lowest, func(p store.Proc) error {
			sum, err := procedure.DecodeSummary(p.Data)
			if err != nil {
				return fmt.Errorf("admin: procedure %d: %w", p.ID, err)
			}
			if sum.ParentID != 0 {
				byParent[sum.ParentID] = append(byParent[sum.ParentID], p.ID)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	out := make([]*adminpb.Procedure, len(infos))
	for i, info := range infos {
		if x != nil {
			info.Children = s.committedChildren(x, info)
			out[i] = toProto(info, s.whyReason(x, info))
		} else {
			info.Children = byParent[info.ID]
			out[i] = toProto(info, "")
		}
	}
	return out, nil
}

var errPageFull = fmt.Errorf("page full")
