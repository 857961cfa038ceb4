package domain_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// adminMethods lists every unary method of the admin API, in admin.proto's
// order, with a fresh request of its type: FuzzAdminRequests calls the one
// its first byte picks. It is read from the service, so a method added to
// admin.proto is fuzzed without a line here.
func adminMethods() []struct {
	name string
	req  proto.Message
} {
	type m = struct {
		name string
		req  proto.Message
	}
	sd := adminpb.File_admin_proto.Services().ByName("Admin")
	var out []m
	for _, md := range adminpb.Admin_ServiceDesc.Methods {
		in := sd.Methods().ByName(protoreflect.Name(md.MethodName)).Input()
		mt, err := protoregistry.GlobalTypes.FindMessageByName(in.FullName())
		if err != nil {
			panic(fmt.Sprintf("admin method %s: request %s: %v", md.MethodName, in.FullName(), err))
		}
		out = append(out, m{md.MethodName, mt.New().Interface()})
	}
	return out
}

// rsMethods lists every method of the Master service (region servers to
// masters) and of the RegionServer service (the leader to a region
// server) with a fresh request of its type, after adminMethods in
// FuzzAdminRequests' numbering. TestAdminFuzzCoversEveryMethod keeps it
// complete.
func rsMethods() []struct {
	service string
	name    string
	req     proto.Message
} {
	type m = struct {
		service string
		name    string
		req     proto.Message
	}
	return []m{
		{"Master", "RegisterServer", &rspb.RegisterServerRequest{}},
		{"Master", "Heartbeat", &rspb.HeartbeatRequest{}},
		{"Master", "ReportTransition", &rspb.ReportTransitionRequest{}},
		{"RegionServer", "ExecuteBatch", &rspb.BatchRequest{}},
		{"RegionServer", "ListRegions", &rspb.ListRegionsRequest{}},
	}
}

// atLimit returns req with every field reqlimit bounds at its limit (over
// it by one byte or entry, with over): a string of the most bytes, three
// entries of a list or map (the most, if fewer), nested messages filled
// alike. Seeds of the largest requests the servers must take, or refuse.
func atLimit(req proto.Message, over int) proto.Message {
	out := proto.Clone(req)
	fillAtLimit(out.ProtoReflect(), over, 0)
	return out
}

func fillAtLimit(m protoreflect.Message, over, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		lim, ok := reqlimit.Fields[fd.FullName()]
		if !ok && fd.Kind() != protoreflect.MessageKind {
			continue
		}
		text := func(n int) string { return strings.Repeat("a", n) }
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for j := range min(lim.Items+over, 3) {
				k := fmt.Sprintf("k%d", j)
				mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(text(min(lim.Bytes, lim.Total/3)+over)))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			n := min(lim.Items, 3)
			if over > 0 {
				n = lim.Items + over
			}
			for range n {
				switch {
				case fd.Kind() == protoreflect.StringKind:
					l.Append(protoreflect.ValueOfString(text(lim.Bytes)))
				case fd.Message() != nil:
					e := l.NewElement()
					if depth < 2 {
						fillAtLimit(e.Message(), 0, depth+1)
					}
					l.Append(e)
				default:
					l.Append(protoreflect.ValueOfUint64(1 << 40))
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(text(lim.Bytes+over)))
		case fd.Kind() == protoreflect.MessageKind && depth < 2:
			fillAtLimit(m.Mutable(fd).Message(), over, depth+1)
		}
	}
}

// callAdmin calls method name on c (any generated client) with req, by
// reflection (the method's Go name is its RPC name).
func callAdmin(ctx context.Context, c any, name string, req proto.Message) error {
	fn := reflect.ValueOf(c).MethodByName(name)
	out := fn.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(req)})
	if err, _ := out[1].Interface().(error); err != nil {
		return err
	}
	return nil
}

// TestAdminFuzzCoversEveryMethod: every method of the region servers'
// services is in rsMethods (adminMethods is read from the admin service
// itself; its one stream, WatchProcedure, is fuzzed through its request in
// GetProcedure's shape by the API's own tests).
func TestAdminFuzzCoversEveryMethod(t *testing.T) {
	rsListed := map[string]bool{}
	for _, m := range rsMethods() {
		rsListed[m.service+"/"+m.name] = true
	}
	for _, sd := range []grpc.ServiceDesc{rspb.Master_ServiceDesc, rspb.RegionServer_ServiceDesc} {
		for _, md := range sd.Methods {
			svc := strings.TrimPrefix(sd.ServiceName, "baton.rs.v1.")
			if !rsListed[svc+"/"+md.MethodName] {
				t.Errorf("%s method %s is not fuzzed: add it to rsMethods", svc, md.MethodName)
			}
		}
	}
}

// FuzzAdminRequests decodes a request of the method its first byte picks
// (of the admin API, the Master service or the RegionServer service)
// from the rest of the bytes and sends it to a live in-process cluster
// (three masters, three region servers), to the master or region server
// its second byte picks (the leader, or a standby that forwards): no call
// may panic a master, every error must be a gRPC status with a code a
// client can act on (not UNKNOWN), and the cluster must still answer
// afterwards. The seed corpus (a request of every method, empty, with
// typical fields, and with every field at its limit and one over it)
// runs in every `go test`; `go test -fuzz FuzzAdminRequests
// ./cluster/domain/` explores.
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
	// Every request with its fields at their limits, and one over them,
	// of the admin API and of the region servers' protocol.
	rsm := rsMethods()
	for i, m := range methods {
		for _, over := range []int{0, 1} {
			f.Add(append([]byte{byte(i), byte(over)}, mustMarshal(f, atLimit(m.req, over))...))
		}
	}
	for i, m := range rsm {
		f.Add(append([]byte{byte(len(methods) + i), 0}, mustMarshal(f, m.req)...))
		for _, over := range []int{0, 1} {
			f.Add(append([]byte{byte(len(methods) + i), byte(over)}, mustMarshal(f, atLimit(m.req, over))...))
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
	var rsConns []*grpc.ClientConn
	for _, id := range slices.Sorted(maps.Keys(h.c.RegionServers())) {
		cc, err := grpc.NewClient(h.c.RegionServer(id).Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { _ = cc.Close() })
		rsConns = append(rsConns, cc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		pick := int(data[0]) % (len(methods) + len(rsm))
		var (
			name   string
			req    proto.Message
			client any
		)
		// Any master: the leader answers, a standby forwards or reads
		// its own state.
		node := h.masters[int(data[1])%len(h.masters)]
		switch {
		case pick < len(methods):
			name, req, client = methods[pick].name, proto.Clone(methods[pick].req), node.client
		case rsm[pick-len(methods)].service == "Master":
			m := rsm[pick-len(methods)]
			name, req, client = m.name, proto.Clone(m.req), rspb.NewMasterClient(node.cc)
		default:
			m := rsm[pick-len(methods)]
			name, req, client = m.name, proto.Clone(m.req), rspb.NewRegionServerClient(rsConns[int(data[1])%len(rsConns)])
		}
		proto.Reset(req)
		if err := proto.Unmarshal(data[2:], req); err != nil {
			return // not a request of this type: nothing reaches the server
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := callAdmin(ctx, client, name, req)
		if err == nil {
			served.Add(1)
		} else {
			st, ok := status.FromError(err)
			if !ok || st.Code() == codes.Unknown {
				t.Fatalf("%s(%v): error without a status code a client can act on: %v", name, req, err)
			}
		}
		// The masters are still there, whatever the call did.
		for _, mn := range h.masters {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := mn.client.ClusterStatus(sctx, &adminpb.ClusterStatusRequest{})
			scancel()
			if err != nil && status.Code(err) == codes.Unknown {
				t.Fatalf("after %s(%v): cluster status: %v", name, req, err)
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
