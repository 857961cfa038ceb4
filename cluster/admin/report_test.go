package admin

import (
	"context"
	"testing"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Every reader of a member's report goes through cluster.ReadReport and
// means the same by it: no report (0.1.0) and a corrupt one are shown as
// none (version "" and level 0) in the gRPC status and /status alike, and
// count as format 1 when the leader computes the cluster version; a good
// one is shown as reported and counts at its level.
func TestReportReadersAgree(t *testing.T) {
	good := version.Build{Version: "0.2.0", MaxFormat: version.Format2}
	for _, tc := range []struct {
		name        string
		report      []byte // nil: none committed
		shown       version.Build
		countedNext version.Format
	}{
		{name: "no report", shown: version.Build{}, countedNext: version.Format1},
		{name: "corrupt report", report: []byte("\x00\xff"), shown: version.Build{}, countedNext: version.Format1},
		{name: "report without a level", report: []byte(`{"record":1,"version":"0.2.0","max_format":0}`), shown: version.Build{}, countedNext: version.Format1},
		{name: "good report", report: version.EncodeReport(good), shown: good, countedNext: version.Format2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string][]byte{cluster.ClusterFormatKey: version.EncodeClusterFormat(version.Format1)}
			if tc.report != nil {
				kv[cluster.VersionKey("m1")] = tc.report
			}
			peers := []cluster.PeerStatus{{ID: "m0", Suffrage: "Voter"}, {ID: "m1", Suffrage: "Voter"}}
			b := &fakeBackend{id: "m0", leaderID: "m0", state: "Leader", kv: kv, peers: peers}
			s, err := New(b, Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop(context.Background())

			st, err := s.ClusterStatus(context.Background(), &adminpb.ClusterStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var grpcPeer *adminpb.Peer
			for _, p := range st.GetPeers() {
				if p.GetId() == "m1" {
					grpcPeer = p
				}
			}
			if grpcPeer == nil || grpcPeer.GetVersion() != tc.shown.Version || grpcPeer.GetMaxFormat() != uint32(tc.shown.MaxFormat) {
				t.Errorf("ClusterStatus shows m1 as %v, want %+v", grpcPeer, tc.shown)
			}

			var httpPeer *PeerJSON
			doc := StatusOf(b)
			for i := range doc.Peers {
				if doc.Peers[i].ID == "m1" {
					httpPeer = &doc.Peers[i]
				}
			}
			if httpPeer == nil || httpPeer.Version != tc.shown.Version || httpPeer.MaxFormat != uint32(tc.shown.MaxFormat) {
				t.Errorf("/status shows m1 as %+v, want %+v", httpPeer, tc.shown)
			}

			// This leader, m0, runs version.MaxFormat: m1 alone decides.
			if committed, next := s.nextClusterFormat(peers, nil); committed != version.Format1 || next != tc.countedNext {
				t.Errorf("nextClusterFormat = %v, %v; want %v, %v", committed, next, version.Format1, tc.countedNext)
			}
		})
	}
}
