package admin_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// impostor is an admin API that records what each call carries.
type impostor struct {
	addr string
	mu   sync.Mutex
	seen []metadata.MD
}

func startImpostor(t *testing.T) *impostor {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	im := &impostor{addr: lis.Addr().String()}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		im.mu.Lock()
		im.seen = append(im.seen, md)
		im.mu.Unlock()
		return status.Error(codes.Unimplemented, "impostor")
	}))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return im
}

func (im *impostor) calls() []metadata.MD {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]metadata.MD(nil), im.seen...)
}

// TestPlaintextRegistrationNeedsTheClusterSecret: in a plaintext cluster
// with a cluster secret, a caller without it cannot register the leader
// at its own address (a standby would forward there, secret and all);
// and an address it gets registered otherwise (AddPeer, open to anyone
// in plaintext) is never sent the secret, nor what a forward says of its
// client.
func TestPlaintextRegistrationNeedsTheClusterSecret(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 3})
	li, _ := c.WaitLeader()
	leader, standby := c.Master(li), c.Master((li+1)%3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	im := startImpostor(t)
	attacker := func(m *clustertest.Master) adminpb.AdminClient {
		cc, err := grpc.NewClient(m.AdminAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return adminpb.NewAdminClient(cc)
	}
	for _, m := range []*clustertest.Master{standby, leader} {
		_, err := attacker(m).RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: leader.ID, AdminAddress: im.addr})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("RegisterNode of the leader at an impostor, without the secret, at %s: %v; want PERMISSION_DENIED", m.ID, err)
		}
		_, err = attacker(m).AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "Forged"}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("AppendAudit without the secret at %s: %v; want PERMISSION_DENIED", m.ID, err)
		}
	}
	at := attacker(standby)
	testwait.For(t, 30*time.Second, "the standby forwarding to the impostor", func() bool {
		if _, err := at.AddPeer(ctx, &adminpb.AddPeerRequest{Id: leader.ID, RaftAddress: leader.Node().Status().Address, AdminAddress: im.addr}); err != nil {
			t.Logf("add peer: %v", err)
		}
		_, _ = at.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns"})
		return len(im.calls()) > 0
	})
	for _, md := range im.calls() {
		for _, k := range []string{security.ClusterSecretKey, "x-baton-peer", "x-baton-principal"} {
			if len(md.Get(k)) > 0 {
				t.Fatalf("a master sent %s to an address no proven registration gave: %v", k, md)
			}
		}
	}
}
