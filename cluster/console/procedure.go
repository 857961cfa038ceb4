package console

import (
	"context"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// maxTree bounds the procedures the tree on a procedure's page reads (one
// read each): a table of thousands of regions shows its first ones and
// says how many more there are.
const maxTree = 60

type procedurePage struct {
	base
	P        *adminpb.Procedure
	Terminal bool
	Data     string
	Result   string
	// Ancestors from the root down to the parent; Tree from the root.
	Ancestors []*adminpb.Procedure
	Tree      *treeNode
	Timeline  []timelineRow
	// Held and Awaited: the procedure's part in the lock table.
	Held, Awaited []lockRow
	LocksError    string
	CanAbort      bool
}

type treeNode struct {
	P        *adminpb.Procedure
	Current  bool
	Children []*treeNode
	// More counts the children not read (maxTree reached).
	More int
	// Unknown counts the children read but not found: forgotten as they
	// succeeded under a tree still running (procedure.ForgetsChildren),
	// or of a finished root that kept no summary of them (it finished on
	// a version that kept none, or its tree was too big for them all).
	// A finished root's other children are shown from their summaries.
	Unknown int
}

type timelineRow struct {
	*adminpb.ProcedureTransition
	N int
	// Took is how long the procedure stayed there: until the next
	// transition, or until now (SoFar) for the last of a live one.
	Took    string
	SoFar   bool
	Retries int32
}

// lockRow is one lock a procedure holds or waits for, with the others
// involved.
type lockRow struct {
	Entry *adminpb.LockEntry
	Mode  string
	// Position in the queue (1: next), for a lock waited for.
	Position int
}

func pathID(r *http.Request) (uint64, error) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%q is not a procedure id", r.PathValue("id"))
	}
	return id, nil
}

func (rd *reads) getProc(id uint64) (*adminpb.Procedure, error) {
	return read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.Procedure, error) {
		return rd.c.self.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id, Consistency: cons})
	}, readOf)
}

// procPage starts a page about the procedure in the path: its reads, id
// and procedure, or a nil *reads once the failure page is written. title
// names the page ("Abort"), and procTitle with the id the page of a
// procedure that cannot be read ("Abort procedure 7").
func (c *Console) procPage(w http.ResponseWriter, r *http.Request, title, procTitle string) (*reads, uint64, *adminpb.Procedure) {
	rd := c.pageReads(w, r, title)
	if rd == nil {
		return nil, 0, nil
	}
	id, err := pathID(r)
	if err != nil {
		c.fail(w, rd, title, err)
		return nil, 0, nil
	}
	proc, err := rd.getProc(id)
	if err != nil {
		c.fail(w, rd, procTitle+" "+strconv.FormatUint(id, 10), err)
		return nil, 0, nil
	}
	return rd, id, proc
}

func (c *Console) procedure(w http.ResponseWriter, r *http.Request) {
	rd, id, proc := c.procPage(w, r, "Procedure", "Procedure")
	if rd == nil {
		return
	}
	p := procedurePage{P: proc, Terminal: client.Terminal(proc.GetState()), Data: fmtData(proc.GetData())}
	if res := proc.GetResult(); len(res) > 0 {
		p.Result = fmtData(res)
		if !utf8.Valid(res) {
			p.Result = "(binary) " + p.Result
		}
	}
	p.CanAbort = !p.Terminal && !proc.GetAbortRequested() && !proc.GetRollingBack()
	p.Timeline = timeline(proc.GetHistory(), p.Terminal, time.Now())
	p.Ancestors, p.Tree = c.tree(rd, proc)

	locks, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListLocksResponse, error) {
		return c.self.ListLocks(ctx, &adminpb.ListLocksRequest{ProcId: id, Consistency: cons})
	}, nil)
	if err != nil {
		p.LocksError = leaderOnly(rd, err)
	} else {
		for _, e := range locks.GetLocks() {
			for _, h := range e.GetHolders() {
				if h.GetProcId() == id {
					p.Held = append(p.Held, lockRow{Entry: e, Mode: h.GetMode()})
				}
			}
			for i, wt := range e.GetWaiters() {
				if wt.GetProcId() == id {
					p.Awaited = append(p.Awaited, lockRow{Entry: e, Mode: wt.GetMode(), Position: i + 1})
				}
			}
		}
	}
	p.base = c.base(rd, "Procedure "+strconv.FormatUint(id, 10), "procedures", !p.Terminal)
	switch r.URL.Query().Get("done") {
	case "abort":
		p.Flash = "Abort requested: the procedure rolls back its executed steps (below, as they go)."
	}
	c.render(w, http.StatusOK, "procedure", p)
}

// timeline turns a history into rows with how long each transition lasted.
func timeline(h []*adminpb.ProcedureTransition, terminal bool, now time.Time) []timelineRow {
	out := make([]timelineRow, len(h))
	for i, t := range h {
		row := timelineRow{ProcedureTransition: t, N: i + 1, Retries: max(t.GetAttempt()-1, 0)}
		switch {
		case i+1 < len(h):
			row.Took = fmtDur(time.Duration(h[i+1].GetAtUnixMs()-t.GetAtUnixMs()) * time.Millisecond)
		case terminal:
			row.Took = "—"
		default:
			row.Took, row.SoFar = fmtDur(now.Sub(time.UnixMilli(t.GetAtUnixMs()))), true
		}
		out[i] = row
	}
	return out
}

// tree reads proc's ancestors up to its root, and the root's descendants
// (maxTree procedures at most, breadth first).
func (c *Console) tree(rd *reads, proc *adminpb.Procedure) ([]*adminpb.Procedure, *treeNode) {
	var ancestors []*adminpb.Procedure
	root := proc
	for depth := 0; root.GetParentId() != 0 && depth < 32; depth++ {
		parent, err := rd.getProc(root.GetParentId())
		if err != nil {
			break
		}
		ancestors = append([]*adminpb.Procedure{parent}, ancestors...)
		root = parent
	}
	top := &treeNode{P: root, Current: root.GetId() == proc.GetId()}
	queue := []*treeNode{top}
	fetched := 1
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, cid := range n.P.GetChildren() {
			if fetched >= maxTree {
				n.More++
				continue
			}
			// A read that finds nothing counts too: a crash recovery's
			// finished children are forgotten (procedure.ForgetsChildren)
			// while it lists hundreds of thousands of them.
			fetched++
			child := proc
			if cid != proc.GetId() {
				var err error
				if child, err = rd.getProc(cid); err != nil {
					n.Unknown++
					continue
				}
			}
			cn := &treeNode{P: child, Current: cid == proc.GetId()}
			n.Children = append(n.Children, cn)
			queue = append(queue, cn)
		}
	}
	return ancestors, top
}
