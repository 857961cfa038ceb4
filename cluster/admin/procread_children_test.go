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

// TestCommittedChildrenIsTheStoredPrefix checks that a procedure's
// committed children are found in a handful of store reads, whatever their
// number: a watch of a ten-thousand-region create asks every 50 ms.
func TestCommittedChildrenIsTheStoredPrefix(t *testing.T) {
	const n = 10000
	children := make([]uint64, n)
	for i := range children {
		children[i] = uint64(100 + i)
	}
	for _, tc := range []struct {
		name      string
		committed int // the first this many children are stored
		state     procedure.State
		want      int
	}{
		{"all committed", n, procedure.Waiting, n},
		{"last step's children not yet committed", n - 500, procedure.Waiting, n - 500},
		{"none committed", 0, procedure.Runnable, 0},
		{"only the first", 1, procedure.Waiting, 1},
		// A finished procedure's children were all committed before its
		// end, and have been deleted from the store with their root.
		{"finished", 0, procedure.Success, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := map[uint64]bool{}
			for _, c := range children[:tc.committed] {
				ids[c] = true
			}
			reads := 0
			s := &Server{b: storedSet{ids: ids, reads: &reads}}
			got := s.committedChildren(childrenProcs{children: children}, procedure.Info{ID: 1, State: tc.state})
			if !slices.Equal(got, children[:tc.want]) {
				t.Fatalf("committed children: %d listed (first %v), want the first %d", len(got), got[:min(len(got), 3)], tc.want)
			}
			if reads > 20 {
				t.Errorf("%d store reads for %d children, want a search's (≤ 20)", reads, n)
			}
		})
	}
}
