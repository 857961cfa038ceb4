package admin

import (
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
