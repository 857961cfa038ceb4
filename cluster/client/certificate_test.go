package client_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestCertificateRequiredIsUnauthenticatedAtOnce: a client with the CA
// alone meeting a server that requires a client certificate is told so,
// UNAUTHENTICATED, on every try, whether gRPC saw the server's alert or
// only the reset after it (the check asks the server then), and is not
// retried until its timeout.
func TestCertificateRequiredIsUnauthenticatedAtOnce(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m1"})
	gs := grpc.NewServer(security.MasterPolicy().ServerOptions(srv)...)
	adminpb.RegisterAdminServer(gs, adminpb.UnimplementedAdminServer{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	creds, err := security.LoadClient(security.Files{CA: pki.CAFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		// A minute: only an answer that comes before it, not a retry
		// loop running it out, passes.
		c, err := client.New([]string{ln.Addr().String()}, client.WithCallTimeout(time.Minute), client.WithDialOptions(creds.DialOption(security.RoleMaster)),
			client.WithCertificateCheck(func(ctx context.Context, addr string) bool {
				return creds.CertificateRequired(ctx, addr, 10*time.Second, security.RoleMaster)
			}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.WhoAmI(context.Background())
		c.Close()
		if status.Code(err) != codes.Unauthenticated || !strings.HasPrefix(status.Convert(err).Message(), client.ErrCertificateRequired) {
			t.Fatalf("try %d: %v, want UNAUTHENTICATED saying a certificate is required", i, err)
		}
	}
}
