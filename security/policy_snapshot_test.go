package security

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

var updatePolicySnapshot = flag.Bool("update-policy-snapshot", false, "rewrite testdata/policy_decisions.golden from today's policies")

// TestPolicyDecisionsSnapshot pins what MasterPolicy, RegionServerPolicy
// and MasterPolicyFor(either) decide for every method of the Admin,
// Master and RegionServer services, one method each service does not
// have (a newer peer's), health and reflection, for every role, a
// region server acting as itself, as another, naming no server or on a
// stream, and a caller without a certificate: how the policies are built
// may change, who they admit may not. A deliberate change of who is
// admitted rewrites the file with -update-policy-snapshot, and the diff
// shows it.
func TestPolicyDecisionsSnapshot(t *testing.T) {
	var methods []string
	for _, sd := range []protoreflect.ServiceDescriptor{
		adminpb.File_admin_proto.Services().ByName("Admin"),
		rspb.File_regionserver_proto.Services().ByName("Master"),
		rspb.File_regionserver_proto.Services().ByName("RegionServer"),
	} {
		ms := sd.Methods()
		for i := range ms.Len() {
			methods = append(methods, optionspb.FullMethod(ms.Get(i)))
		}
		methods = append(methods, "/"+string(sd.FullName())+"/NotInThisVersion")
	}
	methods = append(methods,
		HealthService+"Check", HealthService+"Watch",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
		"/other.v1.Service/Call",
	)
	type caller struct {
		name string
		ctx  context.Context
		req  any
	}
	callers := []caller{
		{"master", withTestCaller(master1), fakeServerReq{"m1"}},
		{"client", withTestCaller(alice), fakeServerReq{"alice"}},
		{"rs-self", withTestCaller(rs1), fakeServerReq{"rs1"}},
		{"rs-other", withTestCaller(rs1), fakeServerReq{"rs2"}},
		{"rs-no-server", withTestCaller(rs1), struct{}{}},
		{"rs-stream", withTestCaller(rs1), nil},
		{"no-cert", context.Background(), nil},
		{"no-cert-token", metadata.NewIncomingContext(context.Background(), metadata.Pairs(authorizationKey, "Bearer bt_x")), nil},
	}
	policies := []struct {
		name string
		p    *Policy
	}{
		{"master", MasterPolicy()},
		{"regionserver", RegionServerPolicy()},
		{"master-either", MasterPolicyFor(ClientAuthEither, "RegisterNode", "AppendAudit")},
	}
	var got bytes.Buffer
	for _, pol := range policies {
		for _, m := range methods {
			for _, c := range callers {
				verdict := "OK"
				if err := pol.p.check(c.ctx, m, c.req); err != nil {
					s := status.Convert(err)
					verdict = s.Code().String() + ": " + s.Message()
				}
				fmt.Fprintf(&got, "%s %s %s -> %s\n", pol.name, m, c.name, verdict)
			}
		}
	}
	golden := filepath.Join("testdata", "policy_decisions.golden")
	if *updatePolicySnapshot {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range max(len(gl), len(wl)) {
			var g, w []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if !bytes.Equal(g, w) {
				t.Errorf("line %d:\n got  %s\n want %s", i+1, g, w)
			}
		}
	}
}
