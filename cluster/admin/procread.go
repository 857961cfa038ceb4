package admin

import (
	"cmp"
	"fmt"
	"slices"

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
		return s.summarisedProc(x, id)
	}
	info, err := procedure.DecodeInfo(data)
	if err != nil {
		return nil, procedure.Info{}, fmt.Errorf("admin: procedure %d: %w", id, err)
	}
	if x != nil {
		info.Children = s.committedChildren(x, info)
		why, progress := s.liveWhy(x, info)
		info.Progress = progress
		return toProto(info, why), info, nil
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
	if !f.RootsOnly {
		if infos, err = s.withSummarised(x, infos, f, newestFirst, beforeID, err == errPageFull); err != nil {
			return nil, err
		}
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
		if info.SummaryOnly {
			out[i] = toProto(info, summaryWaiting(info))
			continue
		}
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

// withSummarised merges into a page of stored procedures (infos, in the
// page's order; full says it holds f.Limit) the summarised descendants of
// finished roots that fall within it, and cuts it back to f.Limit: the
// page then ends at its Limit-th id in order, as a page of stored ones
// alone does, so the next page, starting after it, misses none.
func (s *Server) withSummarised(x Procedures, infos []procedure.Info, f procedure.Filter, newestFirst bool, beforeID uint64, full bool) ([]procedure.Info, error) {
	// The ids the page covers: (after, upTo].
	after, upTo := f.AfterID, ^uint64(0)
	if newestFirst {
		after, upTo = 0, beforeID-1
		if full {
			after = infos[len(infos)-1].ID - 1
		}
	} else if full {
		upTo = infos[len(infos)-1].ID
	}
	if upTo <= after {
		return infos, nil
	}
	sums, err := s.summarisedInfos(x, after, upTo, f)
	if err != nil || len(sums) == 0 {
		return infos, err
	}
	stored := make(map[uint64]bool, len(infos))
	for _, info := range infos {
		stored[info.ID] = true
	}
	for _, info := range sums {
		// A descendant still stored (its root's finish wrote, its
		// delete not yet) is listed as stored.
		if !stored[info.ID] {
			infos = append(infos, info)
		}
	}
	slices.SortFunc(infos, func(a, b procedure.Info) int {
		c := cmp.Compare(a.ID, b.ID)
		if newestFirst {
			c = -c
		}
		return c
	})
	if f.Limit > 0 && len(infos) > f.Limit {
		infos = infos[:f.Limit]
	}
	return infos, nil
}

// A finished root's descendants' records are deleted with its finish; the
// root's record keeps a summary of each (procedure.ChildSummary) for as
// long as the root is kept, which GetProcedure and ListProcedures answer
// from (summary_only).

// summarisedRoots is the optional part of a Procedures that finds the
// finished roots whose summaries may hold ids in (after, upTo] (the
// executor keeps an index of them).
type summarisedRoots interface {
	SummarisedRoots(after, upTo uint64) []uint64
}

// staleSummaryScan bounds the stored records a node without an executor
// (a standby serving a stale read) walks back, below the ids asked for,
// for the finished roots that keep their summaries: a descendant whose
// root has more records than this stored between it and the descendant
// is not found there (the leader finds it, by its index).
const staleSummaryScan = 10_000

// eachSummaryRoot calls fn with the record of each finished root that may
// keep summaries of ids in (after, upTo], until fn says stop.
func (s *Server) eachSummaryRoot(x Procedures, after, upTo uint64, fn func(data []byte) (stop bool, err error)) error {
	if sr, ok := x.(summarisedRoots); ok {
		for _, id := range sr.SummarisedRoots(after, upTo) {
			if data, ok := s.b.StoredProcedure(id); ok {
				if stop, err := fn(data); stop || err != nil {
					return err
				}
			}
		}
		return nil
	}
	if x != nil {
		return nil // an executor without the index (a test's): nothing summarised
	}
	sb, ok := s.b.(storedProceduresBefore)
	if !ok {
		return nil
	}
	below := 0
	err := sb.StoredProceduresBefore(upTo, func(p store.Proc) error {
		if p.ID <= after {
			if below++; below > staleSummaryScan {
				return errPageFull
			}
		}
		sum, err := procedure.DecodeSummary(p.Data)
		if err != nil || sum.ParentID != 0 || !sum.State.Terminal() {
			return nil // not a finished root (a record that does not decode is reported where it is listed)
		}
		if lo, hi, ok := procedure.ChildSpan(p.Data); !ok || hi <= after || lo > upTo {
			return nil
		}
		stop, err := fn(p.Data)
		if stop && err == nil {
			return errPageFull
		}
		return err
	})
	if err == errPageFull {
		return nil
	}
	return err
}

// summarisedProc answers GetProcedure for id when no record of it is
// stored: from the summary its finished root keeps, if one does.
func (s *Server) summarisedProc(x Procedures, id uint64) (*adminpb.Procedure, procedure.Info, error) {
	var (
		found procedure.Info
		why   error
	)
	if id > 0 {
		err := s.eachSummaryRoot(x, id-1, id, func(data []byte) (bool, error) {
			info, ok, listed, err := procedure.ChildSummaryInfo(data, id)
			switch {
			case err != nil:
				return false, nil // another root's; reported where it is read itself
			case ok:
				found = info
				return true, nil
			case listed:
				sum, _ := procedure.DecodeSummary(data)
				why = procedure.NoSummaryError(id, sum.ID)
			}
			return false, nil
		})
		if err != nil {
			return nil, procedure.Info{}, err
		}
	}
	if !found.SummaryOnly && why == nil && x != nil {
		// A member its live tree forgot as it succeeded: its record is gone
		// and no root's record holds it yet, but the executor keeps its
		// summary for the root's, and lists it in its parent's children.
		// Only a summary is taken: a live procedure the store lacks is one
		// whose insert has not committed.
		if info, err := x.Get(id); err == nil && info.SummaryOnly {
			found = info
		}
	}
	if !found.SummaryOnly {
		if why == nil {
			why = procedure.Errorf(procedure.ErrNotFound, "procedure %d does not exist", id)
		}
		return nil, procedure.Info{}, why
	}
	return toProto(found, summaryWaiting(found)), found, nil
}

// summaryWaiting is a summarised procedure's waiting_for, as a stored
// one's would be.
func summaryWaiting(info procedure.Info) string {
	if info.State.Terminal() {
		return "finished"
	}
	return ""
}

// summarisedInfos returns the summarised descendants with ids in (after,
// upTo] that f matches.
func (s *Server) summarisedInfos(x Procedures, after, upTo uint64, f procedure.Filter) ([]procedure.Info, error) {
	var out []procedure.Info
	err := s.eachSummaryRoot(x, after, upTo, func(data []byte) (bool, error) {
		infos, _, _, err := procedure.ChildSummaryInfosIn(data, after, upTo)
		if err != nil {
			return false, nil // the root's own listing reports it
		}
		for _, info := range infos {
			if f.Match(info) {
				out = append(out, info)
			}
		}
		return false, nil
	})
	return out, err
}
