package domain_test

import (
	"context"
	"flag"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// adminMethods lists every unary method of the admin API with a fresh
// request of its type: FuzzAdminRequests calls the one its first byte
// picks. TestAdminFuzzCoversEveryMethod keeps the list complete.
func adminMethods() []struct {
	name string
	req  proto.Message
} {
	type m = struct {
		name string
		req  proto.Message
	}
	return []m{
		{"SubmitProcedure", &adminpb.SubmitProcedureRequest{}},
		{"GetProcedure", &adminpb.GetProcedureRequest{}},
		{"ListProcedures", &adminpb.ListProceduresRequest{}},
		{"AbortProcedure", &adminpb.ProcedureRef{}},
		{"PauseProcedure", &adminpb.ProcedureRef{}},
		{"ResumeProcedure", &adminpb.ProcedureRef{}},
		{"AckResult", &adminpb.ProcedureRef{}},
		{"ClusterStatus", &adminpb.ClusterStatusRequest{}},
		{"AddPeer", &adminpb.AddPeerRequest{}},
		{"RemovePeer", &adminpb.RemovePeerRequest{}},
		{"RegisterNode", &adminpb.RegisterNodeRequest{}},
		{"CreateNamespace", &adminpb.NamespaceRequest{}},
		{"DeleteNamespace", &adminpb.NamespaceRequest{}},
		{"ListNamespaces", &adminpb.ListNamespacesRequest{}},
		{"GetNamespace", &adminpb.GetNamespaceRequest{}},
		{"CreateTable", &adminpb.CreateTableRequest{}},
		{"DeleteTable", &adminpb.TableRequest{}},
		{"EnableTable", &adminpb.TableRequest{}},
		{"DisableTable", &adminpb.TableRequest{}},
		{"DescribeTable", &adminpb.TableRequest{}},
		{"ListTables", &adminpb.ListTablesRequest{}},
		{"ListRegions", &adminpb.ListRegionsRequest{}},
		{"MoveRegion", &adminpb.MoveRegionRequest{}},
		{"ListServers", &adminpb.ListServersRequest{}},
		{"ServerRegions", &adminpb.ServerRegionsRequest{}},
		{"Balance", &adminpb.BalanceRequest{}},
		{"AcquireLock", &adminpb.AcquireLockRequest{}},
		{"LockHeartbeat", &adminpb.LockRef{}},
		{"ReleaseLock", &adminpb.LockRef{}},
		{"AssignRegion", &adminpb.RepairRegionRequest{}},
		{"UnassignRegion", &adminpb.RepairRegionRequest{}},
		{"RecoverServer", &adminpb.RecoverServerRequest{}},
		{"CancelProcedures", &adminpb.CancelProceduresRequest{}},
		{"BypassProcedure", &adminpb.BypassProcedureRequest{}},
		{"SetMaintenance", &adminpb.SetMaintenanceRequest{}},
		{"GetMaintenance", &adminpb.GetMaintenanceRequest{}},
		{"ListRepairs", &adminpb.ListRepairsRequest{}},
		{"ListLocks", &adminpb.ListLocksRequest{}},
		{"ProcedureStats", &adminpb.ProcedureStatsRequest{}},
		{"WhoAmI", &adminpb.WhoAmIRequest{}},
		{"AclGrant", &adminpb.AclGrantRequest{}},
		{"AclRevoke", &adminpb.AclRevokeRequest{}},
		{"AclCreateToken", &adminpb.AclCreateTokenRequest{}},
		{"AclDeleteToken", &adminpb.AclDeleteTokenRequest{}},
		{"AclList", &adminpb.AclListRequest{}},
		{"ListAudit", &adminpb.ListAuditRequest{}},
		{"AppendAudit", &adminpb.AppendAuditRequest{}},
	}
}

// callAdmin calls method name on c with req, by reflection on the
// generated client (the method's Go name is its RPC name).
func callAdmin(ctx context.Context, c adminpb.AdminClient, name string, req proto.Message) error {
	fn := reflect.ValueOf(c).MethodByName(name)
	out := fn.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(req)})
	if err, _ := out[1].Interface().(error); err != nil {
		return err
	}
	return nil
}

// TestAdminFuzzCoversEveryMethod: every unary method of the admin service
// is in adminMethods (the one stream, WatchProcedure, is fuzzed through
// its request in GetProcedure's shape by the API's own tests).
func TestAdminFuzzCoversEveryMethod(t *testing.T) {
	listed := map[string]bool{}
	for _, m := range adminMethods() {
		listed[m.name] = true
	}
	for _, md := range adminpb.Admin_ServiceDesc.Methods {
		if !listed[md.MethodName] {
			t.Errorf("admin method %s is not fuzzed: add it to adminMethods", md.MethodName)
		}
	}
}

// FuzzAdminRequests decodes a request of the method its first byte picks
// from the rest of the bytes and sends it to a live in-process cluster
// (three masters, three region servers), to the master its second byte
// picks (the leader, or a standby that forwards): no call may panic a master, every error
// must be a gRPC status with a code a client can act on (not UNKNOWN),
// and the cluster must still answer afterwards. The seed corpus (a
// request of every method, empty and with typical fields) runs in every
// `go test`; `go test -fuzz FuzzAdminRequests ./cluster/domain/` explores.
func FuzzAdminRequests(f *testing.F) {
	methods := adminMethods()
	for i, m := range methods {
		f.Add(append([]byte{byte(i), 0}, mustMarshal(f, m.req)...))
	}
	seeds := []proto.Message{
		&adminpb.CreateTableRequest{Name: "t", Regions: 2, Nonce: "x"},
		&adminpb.CreateTableRequest{Name: strings.Repeat("a", 300), Regions: -5},
		&adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1", "delay": "0s"}},
		&adminpb.SubmitProcedureRequest{Type: "no such type"},
		&adminpb.ListRegionsRequest{PageSize: -1, PageToken: "garbage"},
		&adminpb.MoveRegionRequest{Region: "nope"},
		&adminpb.AcquireLockRequest{},
		&adminpb.CancelProceduresRequest{},
		&adminpb.ProcedureRef{Id: 1 << 62},
		&adminpb.AclGrantRequest{Client: "ops", Permission: "admin"},
		&adminpb.AclGrantRequest{Client: "../x", Permission: "root"},
		&adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate"},
		&adminpb.AclDeleteTokenRequest{Accessor: "zz"},
		&adminpb.ListAuditRequest{PageToken: "garbage", PageSize: -3},
		&adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "DeleteTable", Id: "1-1"}, {}}},
	}
	for _, s := range seeds {
		for i, m := range methods {
			if reflect.TypeOf(m.req) == reflect.TypeOf(s) {
				f.Add(append([]byte{byte(i), 1}, mustMarshal(f, s)...))
				break
			}
		}
	}
	// With an audit trail, as the binary runs: every call that changes
	// state goes through it too.
	h := newHarness(f, harnessOpts{servers: 3, audit: true})
	f.Cleanup(h.close)
	h.leader()
	// Calls that succeeded: the seeds must reach a working cluster, not
	// only collect UNAVAILABLE from one still electing.
	var served atomic.Int64
	f.Cleanup(func() {
		// Only for the seed corpus run in this process: with -fuzz the
		// inputs run in worker processes, not this one.
		if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() != "" {
			return
		}
		if served.Load() == 0 {
			f.Errorf("no call succeeded: the cluster never served")
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		m := methods[int(data[0])%len(methods)]
		req := proto.Clone(m.req)
		proto.Reset(req)
		if err := proto.Unmarshal(data[2:], req); err != nil {
			return // not a request of this type: nothing reaches the server
		}
		// Any master: the leader answers, a standby forwards or reads
		// its own state.
		node := h.masters[int(data[1])%len(h.masters)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := callAdmin(ctx, node.client, m.name, req)
		if err == nil {
			served.Add(1)
		} else {
			st, ok := status.FromError(err)
			if !ok || st.Code() == codes.Unknown {
				t.Fatalf("%s(%v): error without a status code a client can act on: %v", m.name, req, err)
			}
		}
		// The masters are still there, whatever the call did.
		for _, mn := range h.masters {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := mn.client.ClusterStatus(sctx, &adminpb.ClusterStatusRequest{})
			scancel()
			if err != nil && status.Code(err) == codes.Unknown {
				t.Fatalf("after %s(%v): cluster status: %v", m.name, req, err)
			}
		}
	})
}

func mustMarshal(tb testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
