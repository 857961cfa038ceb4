package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/security"
)

// gatewayCalls are the admin calls the domain builds, each made through
// its generated client method with nonce.
var gatewayCalls = []struct {
	method string
	call   func(ctx context.Context, c adminpb.AdminClient, nonce string) (*adminpb.SubmitProcedureResponse, error)
}{
	{"CreateTable", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.CreateTable(ctx, &adminpb.CreateTableRequest{Namespace: "ns", Name: "t", Regions: 2, Nonce: n})
	}},
	{"DeleteTable", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.DeleteTable(ctx, &adminpb.TableRequest{Namespace: "ns", Name: "t", Nonce: n})
	}},
	{"EnableTable", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.EnableTable(ctx, &adminpb.TableRequest{Namespace: "ns", Name: "t", Nonce: n})
	}},
	{"DisableTable", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.DisableTable(ctx, &adminpb.TableRequest{Namespace: "ns", Name: "t", Nonce: n})
	}},
	{"MoveRegion", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.MoveRegion(ctx, &adminpb.MoveRegionRequest{Region: "r1", ToServer: "rs2", Nonce: n})
	}},
	{"Balance", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.Balance(ctx, &adminpb.BalanceRequest{Nonce: n})
	}},
	{"CreateNamespace", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns", Nonce: n})
	}},
	{"DeleteNamespace", func(ctx context.Context, c adminpb.AdminClient, n string) (*adminpb.SubmitProcedureResponse, error) {
		return c.DeleteNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns", Nonce: n})
	}},
}

// badNonce marks a request stubDomain refuses as bad input (a Balance
// request has no other field to be wrong in).
const badNonce = "bad"

// stubDomain builds a one-step diagnostic procedure for each of the
// domain's methods, and refuses a request carrying badNonce as invalid.
// It records the requests it was asked to build.
type stubDomain struct {
	Domain // nil: nothing else is called
	mu     sync.Mutex
	built  map[string][]proto.Message
	builds []string // what BuildMethods says; default the domain's
}

func (d *stubDomain) BuildMethods() []string {
	if d.builds != nil {
		return d.builds
	}
	return domain.BuildMethods()
}

func (d *stubDomain) Build(method string, req proto.Message) (procedure.Procedure, error) {
	d.mu.Lock()
	if d.built == nil {
		d.built = map[string][]proto.Message{}
	}
	d.built[method] = append(d.built[method], req)
	d.mu.Unlock()
	if f := req.ProtoReflect().Descriptor().Fields().ByName("nonce"); f != nil && req.ProtoReflect().Get(f).String() == badNonce {
		return nil, procedure.Errorf(procedure.ErrInvalid, "%s: bad input", method)
	}
	return diag.New("sleep", map[string]string{"steps": "0"})
}

// Maintenance answers as a domain that cannot read it: the leader asks
// every member's ClusterStatus before it raises the cluster version.
func (d *stubDomain) Maintenance() (catalog.Maintenance, error) {
	return catalog.Maintenance{}, errors.New("stub domain: no maintenance record")
}

func (d *stubDomain) CheckSubmissions(catalog.Executor, string, string) error { return nil }

// ReadableValue is v: the audit trail scans the domain's keys through it.
func (d *stubDomain) ReadableValue(_ string, v []byte) []byte { return v }

// builtFor is how many requests of method d was asked to build.
func (d *stubDomain) builtFor(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.built[method])
}

// sawBad says whether d was asked to build a request carrying badNonce.
func (d *stubDomain) sawBad() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, reqs := range d.built {
		for _, r := range reqs {
			if f := r.ProtoReflect().Descriptor().Fields().ByName("nonce"); f != nil && r.ProtoReflect().Get(f).String() == badNonce {
				return true
			}
		}
	}
	return false
}

// TestGatewayServesTheDomainsCalls: each call the domain builds, with no
// handler of its own, is served on the leader and through a standby
// (forwarded), a retry with its nonce answers the first call's procedure,
// bad input is refused by the standby without a trip to the leader, and
// every call is in the audit trail once.
func TestGatewayServesTheDomainsCalls(t *testing.T) {
	doms := []*stubDomain{{}, {}, {}}
	nodes := startClusterOn(t, 3, steadyRaftTimeout, func(i int, id string, cfg *Config) grpc.DialOption {
		cfg.Access = &Access{}
		return nil
	}, func(i int, n *cluster.Node) Backend { return WithDomain(NodeBackend(n), doms[i]) })
	li := converged(t, nodes)
	si := (li + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, standby := nodes[li].cl, nodes[si].cl
	for _, gc := range gatewayCalls {
		for _, at := range []struct {
			name string
			c    adminpb.AdminClient
		}{{"leader", leader}, {"standby", standby}} {
			nonce := gc.method + "@" + at.name
			first, err := gc.call(ctx, at.c, nonce)
			if err != nil {
				t.Fatalf("%s at the %s: %v", gc.method, at.name, err)
			}
			again, err := gc.call(ctx, at.c, nonce)
			if err != nil || again.GetId() != first.GetId() {
				t.Fatalf("%s retried at the %s: id %d, %v; want the first call's %d", gc.method, at.name, again.GetId(), err, first.GetId())
			}
			p, err := leader.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: first.GetId()})
			if err != nil || p.GetNonce() != nonce || p.GetOwner() != domainOwner {
				t.Fatalf("%s at the %s: procedure %v, %v; want nonce %q, owner %q", gc.method, at.name, p, err, nonce, domainOwner)
			}
		}
		_, err := gc.call(ctx, standby, badNonce)
		wantCode(t, gc.method+" of bad input at the standby", err, codes.InvalidArgument, "bad input")
	}
	for i, d := range doms {
		if i != si && d.sawBad() {
			t.Errorf("m%d built a request the standby m%d refused", i, si)
		}
	}
	for _, gc := range gatewayCalls {
		if got := doms[si].builtFor(security.AdminService + gc.method); got != 3 {
			t.Errorf("the standby built %d %s requests, want 3 (two forwarded, one refused)", got, gc.method)
		}
	}
	recs := auditOf(t, ctx, leader)
	codesOf := map[string][]string{}
	for _, r := range recs {
		codesOf[r.GetMethod()] = append(codesOf[r.GetMethod()], r.GetCode())
	}
	for _, gc := range gatewayCalls {
		got := codesOf[gc.method]
		slices.Sort(got)
		if want := []string{"InvalidArgument", "OK", "OK", "OK", "OK"}; !slices.Equal(got, want) {
			t.Errorf("%s audited as %v, want %v", gc.method, got, want)
		}
	}
}

// TestGatewayCallsCountAgainstTheSubmitRate: the calls the gateway serves
// are submissions to the submit rate limit, as their hand-written
// handlers were: each is let through with a token, and refused without.
func TestGatewayCallsCountAgainstTheSubmitRate(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e6, 0))
	limit, err := RateLimitInterceptor(RateLimit{Rate: 1, Burst: 1, Clock: clk}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes := startClusterOn(t, 1, 50*time.Millisecond, func(i int, id string, cfg *Config) grpc.DialOption {
		cfg.ServerOptions = []grpc.ServerOption{grpc.ChainUnaryInterceptor(limit)}
		return nil
	}, func(i int, n *cluster.Node) Backend { return WithDomain(NodeBackend(n), &stubDomain{}) })
	converged(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, gc := range gatewayCalls {
		clk.Advance(time.Second) // one token
		if _, err := gc.call(ctx, nodes[0].cl, gc.method+"-1"); err != nil {
			t.Fatalf("%s with a token: %v", gc.method, err)
		}
		_, err := gc.call(ctx, nodes[0].cl, gc.method+"-2")
		wantCode(t, gc.method+" over the submit rate", err, codes.ResourceExhausted)
	}
}

// TestNewRefusesABuilderTheGatewayCannotServe: a domain building
// procedures for a method whose rule does not say starts_procedure, that
// answers something else than a SubmitProcedureResponse, or that the
// admin service lacks, is refused when the server is built, naming the
// method.
func TestNewRefusesABuilderTheGatewayCannotServe(t *testing.T) {
	for _, c := range []struct{ method, says string }{
		{adminpb.Admin_GetProcedure_FullMethodName, "starts_procedure"},
		{adminpb.Admin_AcquireLock_FullMethodName, "LockResponse"},
		{"/baton.admin.v1.Admin/NoSuchMethod", "lacks"},
		{adminpb.Admin_SnapshotSave_FullMethodName, "streaming"},
	} {
		d := &stubDomain{builds: append(domain.BuildMethods(), c.method)}
		_, err := New(WithDomain(&fakeBackend{id: "m0", kv: map[string][]byte{}}, d), Config{})
		if err == nil || !strings.Contains(err.Error(), c.method) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("a builder for %s: New = %v; want a refusal naming it and saying %q", c.method, err, c.says)
		}
	}
	if _, err := New(WithDomain(&fakeBackend{id: "m0", kv: map[string][]byte{}}, &stubDomain{}), Config{}); err != nil {
		t.Fatalf("the domain's own builders: %v", err)
	}
}

// TestGatewayRefusesANonceItCannotRead: a method whose rule's
// idempotency_key names no string field of its request is refused, naming
// the method: served, its retries would each start a procedure.
func TestGatewayRefusesANonceItCannotRead(t *testing.T) {
	rule := &optionspb.Rule{Callers: optionspb.Callers_CALLERS_CLIENTS, Permission: optionspb.Permission_PERMISSION_OPERATE, StartsProcedure: true}
	for _, key := range []string{"count", "missing"} {
		rule.IdempotencyKey = key
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, optionspb.E_Rule, rule)
		fdp := &descriptorpb.FileDescriptorProto{
			Name: proto.String("gateway_" + key + "_test.proto"), Package: proto.String("gw" + key), Syntax: proto.String("proto3"),
			Dependency: []string{adminpb.File_admin_proto.Path()},
			MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("count"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("count")},
			}}},
			Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Admin"), Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Start"), InputType: proto.String(".gw" + key + ".Req"), OutputType: proto.String(".baton.admin.v1.SubmitProcedureResponse"), Options: o},
			}}},
		}
		fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
		if err != nil {
			t.Fatal(err)
		}
		method := "/gw" + key + ".Admin/Start"
		_, err = gatewayMethods(fd.Services().Get(0), []string{method})
		if err == nil || !strings.Contains(err.Error(), method) || !strings.Contains(err.Error(), `idempotency_key "`+key+`"`) {
			t.Errorf("idempotency_key %q: %v; want a refusal naming %s", key, err, method)
		}
	}
}

// handServed are the admin methods that start procedures and have a
// handler of their own, each with why the gateway does not serve it.
var handServed = map[string]string{
	"SubmitProcedure":  "builds its procedure with the Factory, from a type and arguments",
	"AcquireLock":      "answers a lock, and waits for it to be granted",
	"AssignRegion":     "a repair: plans, records and acts, answering what it did",
	"UnassignRegion":   "a repair",
	"RecoverServer":    "a repair",
	"CancelProcedures": "a repair: aborts procedures, answering which",
	"BypassProcedure":  "a repair",
}

// TestEveryProcedureStartIsServed: every method admin.proto says starts
// procedures is served, by the gateway (the domain builds it) or by a
// handler of its own (handServed), not both; the gateway takes all the
// domain builds.
func TestEveryProcedureStartIsServed(t *testing.T) {
	built := domain.BuildMethods()
	ms := adminService.Methods()
	for i := range ms.Len() {
		md := ms.Get(i)
		full, name := optionspb.FullMethod(md), string(md.Name())
		r, err := optionspb.RuleOf(md)
		if err != nil {
			t.Fatal(err)
		}
		_, hand := handServed[name]
		gateway := slices.Contains(built, full)
		switch {
		case !r.GetStartsProcedure() && hand:
			t.Errorf("handServed names %s, which starts no procedure", name)
		case !r.GetStartsProcedure():
		case gateway && hand:
			t.Errorf("%s is built by the domain and in handServed: its handler would never run", name)
		case !gateway && !hand:
			t.Errorf("%s starts procedures but neither has a domain builder (cluster/domain's file for it, registerBuilder) nor is in handServed (a handler of its own): it would answer UNIMPLEMENTED", name)
		}
	}
	for name := range handServed {
		if adminService.Methods().ByName(protoreflect.Name(name)) == nil {
			t.Errorf("handServed names %s, which the admin service lacks", name)
		}
	}
	gw, err := gatewayMethods(adminService, built)
	if err != nil || len(gw) != len(built) {
		t.Fatalf("the gateway serves %d of the domain's %d methods: %v", len(gw), len(built), err)
	}
}
