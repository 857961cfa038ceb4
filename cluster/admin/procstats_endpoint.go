package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

// Defaults of ProcedureStatsRequest.
const (
	DefaultStuckAfter = 10 * time.Minute
	DefaultMaxStuck   = 20
	maxMaxStuck       = 1000
	// maxStuckAfter bounds stuck_after_ms to a sensible duration, well
	// inside what msDuration lets through.
	maxStuckAfter = 366 * 24 * time.Hour
)

// ProcedureStats implements adminpb.AdminServer: one pass over the
// committed procedures, each read as a Summary (no payload decoded, no
// allocation per record), counting them by state and type and keeping the
// stuck ones that were written longest ago. A stuck procedure is
// unfinished, not paused, and was not written for stuck_after: no step of
// it persisted an outcome since. Two kinds of long silence are not stuck:
// a suspension whose timer is still to fire (a sleep asked for), and an
// external lock, which is held for as long as its holder renews it.
func (s *Server) ProcedureStats(ctx context.Context, req *adminpb.ProcedureStatsRequest) (*adminpb.ProcedureStatsResponse, error) {
	stuckAfter, err := msDuration("procedure stats", "stuck_after_ms", req.GetStuckAfterMs())
	if err != nil {
		return nil, err
	}
	if stuckAfter > maxStuckAfter {
		return nil, status.Errorf(codes.InvalidArgument, "admin: procedure stats: stuck_after_ms %d, at most %d (366 days)", req.GetStuckAfterMs(), maxStuckAfter.Milliseconds())
	}
	if stuckAfter == 0 {
		stuckAfter = DefaultStuckAfter
	}
	maxStuck := int(req.GetMaxStuck())
	if maxStuck < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "admin: procedure stats: negative max_stuck %d", maxStuck)
	}
	if maxStuck == 0 {
		maxStuck = DefaultMaxStuck
	}
	maxStuck = min(maxStuck, maxMaxStuck)
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ProcedureStatsResponse, error) {
		x, err := s.localExecutor(ri)
		if err != nil {
			return nil, err
		}
		var namer lockHolderNamer
		if d, err := s.domain(); err == nil {
			namer, _ = d.(lockHolderNamer)
		}
		// By state, then type; a count is found by the record's type bytes
		// without making them a string (which only a new type pays).
		counts := map[procedure.State]map[string]*int64{}
		type stuckRef struct {
			id      uint64
			updated time.Time
		}
		var stuck []stuckRef // the oldest, at most maxStuck, oldest first
		out := &adminpb.ProcedureStatsResponse{Read: ri}
		now := time.Now()
		threshold := now.Add(-stuckAfter)
		err = s.b.StoredProceduresAfter(0, func(p store.Proc) error {
			sum, err := procedure.DecodeSummary(p.Data)
			if err != nil {
				return fmt.Errorf("admin: procedure %d: %w", p.ID, err)
			}
			out.Total++
			if sum.ParentID == 0 {
				out.Roots++
			}
			byType := counts[sum.State]
			if byType == nil {
				byType = map[string]*int64{}
				counts[sum.State] = byType
			}
			n := byType[string(sum.Type)]
			if n == nil {
				n = new(int64)
				byType[string(sum.Type)] = n
			}
			*n++
			if sum.State.Terminal() || sum.Paused || !sum.Updated.Before(threshold) || sum.WaitUntil.After(now) {
				return nil
			}
			if namer != nil {
				// Rare enough to decode whole: only the long silent.
				if info, err := procedure.DecodeInfo(p.Data); err == nil {
					if _, external := namer.LockHolderOf(info); external {
						return nil
					}
				}
			}
			out.StuckCount++
			if len(stuck) == maxStuck && !sum.Updated.Before(stuck[len(stuck)-1].updated) {
				return nil
			}
			// After those as old: the pass goes by id, so ties stay in id order.
			i, _ := slices.BinarySearchFunc(stuck, sum.Updated, func(r stuckRef, t time.Time) int {
				if r.updated.After(t) {
					return 1
				}
				return -1
			})
			stuck = slices.Insert(stuck, i, stuckRef{p.ID, sum.Updated})
			if len(stuck) > maxStuck {
				stuck = stuck[:maxStuck]
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for st, byType := range counts {
			for typ, n := range byType {
				out.Counts = append(out.Counts, &adminpb.ProcedureCount{State: st.String(), Type: typ, Count: *n})
			}
		}
		slices.SortFunc(out.Counts, func(a, b *adminpb.ProcedureCount) int {
			return cmp.Or(cmp.Compare(a.GetState(), b.GetState()), cmp.Compare(a.GetType(), b.GetType()))
		})
		for _, r := range stuck {
			p, err := s.storedProc(x, r.id)
			if err != nil {
				continue // finished and deleted since the pass
			}
			out.Stuck = append(out.Stuck, clipProcedure(p, true))
		}
		// A list like any: the oldest that fit in a page's bytes.
		out.Stuck, _ = boundPage(out.Stuck)
		return out, nil
	}, relayed(req, adminpb.AdminClient.ProcedureStats))
}
