package admin

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

func TestTranslateCatalog(t *testing.T) {
	rg := catalog.Region{Name: "default:t,00000,7", Table: "default:t", State: "OPEN", Server: "rs1", ProcID: 9}
	tests := []struct {
		name string
		got  proto.Message
		want proto.Message
	}{
		{"table with regions", tableMsg(catalog.Table{Namespace: "default", Name: "t", State: "ENABLED", Regions: []catalog.Region{rg}}),
			&adminpb.Table{Namespace: "default", Name: "t", State: "ENABLED", Regions: []*adminpb.Region{
				{Name: "default:t,00000,7", Table: "default:t", State: "OPEN", Server: "rs1", ProcId: 9}}}},
		{"server", serverMsgs([]catalog.Server{{ID: "rs1", Address: "h:1", StartCode: 3, RegionCount: 2, LeaseState: "live", LastRenewalUnixMs: 5}})[0],
			&adminpb.Server{Id: "rs1", Address: "h:1", StartCode: 3, RegionCount: 2, LeaseState: "live", LastRenewalUnixMs: 5}},
		{"lock", lockMsg(catalog.Lock{ID: 4, State: "ACQUIRED", LeaseTimeoutMs: 1000}),
			&adminpb.LockResponse{LockId: 4, State: "ACQUIRED", LeaseTimeoutMs: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !proto.Equal(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
	// A failed lock call answers with its error only.
	if m := lockMsg(catalog.Lock{}); m != nil {
		t.Errorf("lockMsg of the zero Lock = %v, want nil", m)
	}
}
