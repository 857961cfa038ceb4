package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/security"
)

// failFastBound is how soon a command must give up when every address it
// was given failed for a reason waiting will not mend (issue 26: within
// 1 s, where it used to wait out --timeout, 10 s by default).
const failFastBound = time.Second

// tlsAddr is the address of a gRPC server that speaks only mutual TLS, as
// an agent started with --tls-* does.
func tlsAddr(t *testing.T) string {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	creds := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m1"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer((&security.Policy{}).ServerOptions(creds)...)
	healthpb.RegisterHealthServer(gs, grpchealth.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// TestUnreachableAddressesFailFast: a refused port, a name that does not
// resolve, a TLS port reached in plaintext, and several of them at once
// fail within failFastBound with exit 3 (the default --timeout is 10 s),
// naming each address and its cause.
func TestUnreachableAddressesFailFast(t *testing.T) {
	dead, dead2, secure := clustertest.DeadAddr(t), clustertest.DeadAddr(t), tlsAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"refused", []string{"cluster", "status", "--addr", dead}, []string{dead + ": connection refused", "waiting will not change that"}},
		{"refused read", []string{"ns", "list", "--addr", dead, "--json"}, []string{dead + ": connection refused"}},
		{"unresolvable", []string{"cluster", "status", "--addr", "127.0.01:7070"}, []string{"127.0.01:7070: the name does not resolve", "no such host"}},
		{"plaintext to TLS", []string{"proc", "list", "--addr", secure}, []string{secure + ": this port speaks TLS: give --tls-ca, --tls-cert, --tls-key"}},
		{"all of them", []string{"table", "list", "--addr", strings.Join([]string{dead, "127.0.01:7070", secure, dead2}, ",")},
			[]string{dead + ": connection refused", dead2 + ": connection refused", "127.0.01:7070: the name does not resolve", secure + ": this port speaks TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := runCLI(t, nil, tc.args...)
			took := time.Since(start)
			if code != exitUnavailable {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUnavailable, stdout, stderr)
			}
			if took > failFastBound {
				t.Errorf("gave up after %v, want within %v", took, failFastBound)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") && !strings.Contains(stdout, `"exit_code": 3`) {
				t.Errorf("--json: no error document with exit_code 3:\n%s", stdout)
			}
		})
	}
}
