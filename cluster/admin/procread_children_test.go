package admin

import (
	"errors"
	"slices"
	"testing"

	"github.com/baton-dev/baton/procedure"
)

// childrenProcs answers Get with a fixed list of children.
type childrenProcs struct {
	Procedures
	children []uint64
}

func (p childrenProcs) Get(id uint64) (procedure.Info, error) {
	return procedure.Info{ID: id, Children: slices.Clone(p.children)}, nil
}

// storedSet is a Backend whose store holds exactly the given ids, and
// counts its reads.
type storedSet struct {
	Backend
	ids   map[uint64]bool
	reads *int
}

func (b storedSet) StoredProcedure(id uint64) ([]byte, bool) {
	*b.reads++
	return []byte{1}, b.ids[id]
}

// TestCommittedChildrenComeFromTheExecutor: a procedure's committed
// children are the executor's list as it is (it lists only children whose
// spawn committed), read without a store lookup, whatever their number (a
// watch of a ten-thousand-region create asks every 50 ms), and whether or
// not their records are still stored: a procedure that forgets its
// children as they succeed (procedure.ForgetsChildren) has them deleted
// while it runs.
func TestCommittedChildrenComeFromTheExecutor(t *testing.T) {
	const n = 10000
	children := make([]uint64, n)
	for i := range children {
		children[i] = uint64(100 + i)
	}
	for _, tc := range []struct {
		name   string
		stored int // the first this many children are still stored
		state  procedure.State
	}{
		{"all stored", n, procedure.Waiting},
		{"the first ones forgotten", n - 500, procedure.Waiting},
		{"none stored", 0, procedure.Waiting},
		{"finished", 0, procedure.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := map[uint64]bool{}
			for _, c := range children[n-tc.stored:] {
				ids[c] = true
			}
			reads := 0
			s := &Server{b: storedSet{ids: ids, reads: &reads}}
			got := s.committedChildren(childrenProcs{children: children}, procedure.Info{ID: 1, State: tc.state})
			if !slices.Equal(got, children) {
				t.Fatalf("committed children: %d listed (first %v), want all %d", len(got), got[:min(len(got), 3)], n)
			}
			if reads > 0 {
				t.Errorf("%d store reads, want none", reads)
			}
		})
	}
}

// forgettingProcs is an executor whose Get answers forgotten with its
// summary (a member its live tree forgot as it succeeded), live as a
// live procedure, and anything else as not found.
type forgettingProcs struct {
	Procedures
	forgotten, live uint64
}

func (p forgettingProcs) Get(id uint64) (procedure.Info, error) {
	switch id {
	case p.forgotten:
		return procedure.Info{ID: id, ParentID: 1, RootID: 1, Type: "region", State: procedure.Success, SummaryOnly: true}, nil
	case p.live:
		return procedure.Info{ID: id, ParentID: 1, RootID: 1, Type: "region", State: procedure.Runnable}, nil
	}
	return procedure.Info{}, procedure.Errorf(procedure.ErrNotFound, "procedure %d does not exist", id)
}

// TestGetProcedureAnswersAForgottenChildOfALiveTree: on the leader, a
// child its live tree forgot as it succeeded is answered from the summary
// the executor keeps (its parent lists it), as it is once the root has
// finished; a live procedure the store does not hold (its insert not yet
// committed) is not answered, nor an id nobody knows.
func TestGetProcedureAnswersAForgottenChildOfALiveTree(t *testing.T) {
	reads := 0
	s := &Server{b: storedSet{ids: map[uint64]bool{}, reads: &reads}}
	x := forgettingProcs{forgotten: 5, live: 7}
	p, info, err := s.storedProcInfo(x, 5)
	if err != nil || !p.GetSummaryOnly() || p.GetState() != "SUCCESS" || p.GetParentId() != 1 || !info.SummaryOnly {
		t.Fatalf("forgotten child: %v, %+v, %v; want its summary", p, info, err)
	}
	for _, id := range []uint64{7, 9} {
		if p, _, err := s.storedProcInfo(x, id); !errors.Is(err, procedure.ErrNotFound) {
			t.Errorf("procedure %d: %v, %v; want NotFound", id, p, err)
		}
	}
	// A standby's stale read has no executor to ask.
	if p, _, err := s.storedProcInfo(nil, 5); !errors.Is(err, procedure.ErrNotFound) {
		t.Errorf("without an executor: %v, %v; want NotFound", p, err)
	}
}
