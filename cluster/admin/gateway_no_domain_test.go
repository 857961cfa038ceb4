package admin

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// TestNoDomainSaysSo (held by gateway_compat.go): a node serving no domain answered the eight
// procedure-starting domain calls (before the gateway, a34269a) with
// UNIMPLEMENTED "admin: this node serves no domain (namespaces, tables,
// regions)", as it still answers the domain's reads. With the gateway,
// a server without a domain has no gateway methods, and the generated
// UnimplementedAdminServer answers "method CreateTable not implemented":
// same code, a different (less telling) message, and a different one from
// the reads' on the same node.
func TestNoDomainSaysSo(t *testing.T) {
	b := &fakeBackend{id: "m0", leaderID: "m0", kv: map[string][]byte{}}
	s, err := New(b, Config{RegisterInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	defer s.Stop(context.Background())
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := adminpb.NewAdminClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, rerr := c.DescribeTable(ctx, &adminpb.TableRequest{Name: "t"})
	if status.Code(rerr) != codes.Unimplemented || !strings.Contains(status.Convert(rerr).Message(), "serves no domain") {
		t.Fatalf("DescribeTable on a node without a domain: %v", rerr)
	}
	for _, gc := range gatewayCalls {
		_, err := gc.call(ctx, c, "n")
		if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "serves no domain") {
			t.Errorf("%s on a node without a domain: %v; want UNIMPLEMENTED saying it serves no domain (as before, and as DescribeTable: %v)", gc.method, err, status.Convert(rerr).Message())
		}
	}
}

// TestServerMethodsStillServe (held by gateway_compat.go): *Server's exported CreateTable,
// EnableTable, ... (the adminpb.AdminServer methods) served the call when
// called in process, as SubmitProcedure still does. Since the gateway they
// are UnimplementedAdminServer's and answer UNIMPLEMENTED: a Go caller of
// the exported method (or a gRPC server registering the Server with
// adminpb.RegisterAdminServer instead of RegisterServices) loses the eight
// calls silently.
func TestServerMethodsStillServe(t *testing.T) {
	x, mem := newExecutor(t)
	b := &fakeBackend{id: "m0", leaderID: "m0", procs: x, kv: map[string][]byte{}, mem: mem}
	s, err := New(WithDomain(b, &stubDomain{}), Config{RegisterInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := s.CreateTable(ctx, &adminpb.CreateTableRequest{Namespace: "ns", Name: "t", Nonce: "n1"})
	if err != nil || r.GetId() == 0 {
		t.Fatalf("(*Server).CreateTable in process: %v, %v; want a procedure id, as before the gateway", r, err)
	}
}
