package admin

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// TestSameProcedure: the watch's change test agrees with proto.Equal on
// every field, children included, and leaves both messages as they were.
func TestSameProcedure(t *testing.T) {
	base := func() *adminpb.Procedure {
		return &adminpb.Procedure{Id: 7, Type: "CreateTable", State: "WAITING", WaitingFor: "waiting for children",
			Children: []uint64{8, 9, 10}, Runs: []*adminpb.ProcedureRun{{Node: "m1", FirstWrite: 1, LastWrite: 3}}}
	}
	for _, tc := range []struct {
		name   string
		change func(p *adminpb.Procedure)
	}{
		{"identical", func(*adminpb.Procedure) {}},
		{"state", func(p *adminpb.Procedure) { p.State = "SUCCESS" }},
		{"reason", func(p *adminpb.Procedure) { p.WaitingFor = "queued" }},
		{"one more child", func(p *adminpb.Procedure) { p.Children = append(p.Children, 11) }},
		{"another child", func(p *adminpb.Procedure) { p.Children[1] = 99 }},
		{"no children", func(p *adminpb.Procedure) { p.Children = nil }},
		{"runs", func(p *adminpb.Procedure) { p.Runs[0].LastWrite = 4 }},
	} {
		a, b := base(), base()
		tc.change(b)
		want := proto.Equal(a, b)
		ac, bc := slices.Clone(a.Children), slices.Clone(b.Children)
		if got := sameProcedure(a, b); got != want {
			t.Errorf("%s: sameProcedure %v, proto.Equal %v", tc.name, got, want)
		}
		if !slices.Equal(a.Children, ac) || !slices.Equal(b.Children, bc) {
			t.Errorf("%s: the children changed: %v %v", tc.name, a.Children, b.Children)
		}
	}
}
