package procedure

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/store"
)

// TestRetryOfAHeldProcedureDoesNotDuplicate: a tree held at load (its root
// of an unknown type, written by a newer version, or a member that cannot
// be decoded) keeps its root's nonce: a client retrying that submission is
// told about the held procedure, by id, and no second procedure starts.
func TestRetryOfAHeldProcedureDoesNotDuplicate(t *testing.T) {
	noop := []byte(`{}`)
	tests := []struct {
		name string
		recs []record
	}{
		{"unknown type", []record{{id: 1, root: 1, typeName: "gone", typeVersion: 1, state: Runnable, data: noop}}},
		{"newer version", []record{{id: 1, root: 1, typeName: "noop", typeVersion: 9, state: Runnable, data: noop}}},
		{"corrupt child", []record{
			{id: 1, root: 1, typeName: "noop", typeVersion: 1, state: Waiting, stack: []int32{0}, data: noop},
			{id: 2, parent: 1, root: 1, typeName: "noop", typeVersion: 1, state: Runnable, data: []byte("{not json")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			for _, r := range tc.recs {
				if r.parent == 0 {
					r.owner, r.nonce = "client", "n1"
				}
				if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
					t.Fatal(err)
				}
			}
			h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = lifecycleRegistry(t) })
			if len(h.x.Problems()) == 0 {
				t.Fatal("the tree was not held")
			}
			id, err := h.x.Submit(&noopProc{}, SubmitOptions{Owner: "client", Nonce: "n1"})
			if !errors.Is(err, ErrHeld) || !errors.Is(err, ErrNotAllowed) || id != 1 {
				t.Fatalf("retry of a held submission: id %d, error %v; want id 1 and ErrHeld", id, err)
			}
			if live := h.x.List(Filter{}); len(live) != 0 || mem.Len() != len(tc.recs) {
				t.Fatalf("a second procedure was created: live %+v, store holds %d", live, mem.Len())
			}
			// Another nonce is an ordinary submission.
			if id, err := h.x.Submit(&noopProc{}, SubmitOptions{Owner: "client", Nonce: "n2"}); err != nil || id <= uint64(len(tc.recs)) {
				t.Fatalf("new submission: id %d, error %v", id, err)
			}
		})
	}
}
