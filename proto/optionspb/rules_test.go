package optionspb_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

// services are every gRPC service Baton serves.
func services() []protoreflect.ServiceDescriptor {
	var out []protoreflect.ServiceDescriptor
	for _, f := range []protoreflect.FileDescriptor{adminpb.File_admin_proto, rspb.File_regionserver_proto} {
		for i := range f.Services().Len() {
			out = append(out, f.Services().Get(i))
		}
	}
	return out
}

// serviceOf is the first service of the file fdp describes: a made-up
// service, to show what Rules and Limits refuse.
func serviceOf(t *testing.T, fdp *descriptorpb.FileDescriptorProto) protoreflect.ServiceDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0)
}

// errorSays reports each of wants that err does not say.
func errorSays(t *testing.T, err error, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestEveryMethodHasARule: every rpc of every service (Admin, Master,
// RegionServer) declares its rule beside it, and no rule contradicts
// itself. A method added without one fails here, as a field without a
// limit fails TestEveryRequestFieldHasALimit.
func TestEveryMethodHasARule(t *testing.T) {
	svcs := services()
	var names []string
	for _, s := range svcs {
		names = append(names, string(s.FullName()))
	}
	if strings.Join(names, " ") != "baton.admin.v1.Admin baton.rs.v1.RegionServer baton.rs.v1.Master" {
		t.Fatalf("services: %v: a service was added or removed; walk it here", names)
	}
	n := 0
	for _, s := range svcs {
		ms := s.Methods()
		for i := range ms.Len() {
			n++
			m := ms.Get(i)
			r, err := optionspb.RuleOf(m)
			if err != nil {
				t.Error(err)
				continue
			}
			// A submission's nonce is its idempotency key; a method
			// starting nothing has none to declare.
			hasNonce := m.Input().Fields().ByName("nonce") != nil
			if want := r.GetStartsProcedure() && hasNonce; want != (r.GetIdempotencyKey() == "nonce") || (!want && r.GetIdempotencyKey() != "") {
				t.Errorf("%s: idempotency_key %q; starts procedures %v, request has a nonce %v", optionspb.FullMethod(m), r.GetIdempotencyKey(), r.GetStartsProcedure(), hasNonce)
			}
		}
	}
	rules, err := optionspb.Rules(svcs...)
	if err != nil || len(rules) != n || n < 50 {
		t.Fatalf("Rules: %d of %d methods, %v", len(rules), n, err)
	}
}

// TestRulesRefuseAMethodWithoutARule: a method with no rule, or with one
// that contradicts itself, is named in Rules' error, and left out of its
// table, so that no caller can serve it by a default.
func TestRulesRefuseAMethodWithoutARule(t *testing.T) {
	rule := func(r *optionspb.Rule) *descriptorpb.MethodOptions {
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, optionspb.E_Rule, r)
		return o
	}
	method := func(name string, o *descriptorpb.MethodOptions) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".t.Req"), OutputType: proto.String(".t.Req"), Options: o}
	}
	clients := optionspb.Callers_CALLERS_CLIENTS
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("nonce"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("nonce"),
		}}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S"), Method: []*descriptorpb.MethodDescriptorProto{
			method("Good", rule(&optionspb.Rule{Callers: clients, Permission: optionspb.Permission_PERMISSION_OPERATE, StartsProcedure: true, IdempotencyKey: "nonce"})),
			method("Bare", nil),
			method("NoCallers", rule(&optionspb.Rule{Permission: optionspb.Permission_PERMISSION_READ})),
			method("NoPermission", rule(&optionspb.Rule{Callers: clients})),
			method("UnauditedRead", rule(&optionspb.Rule{Callers: clients, Permission: optionspb.Permission_PERMISSION_READ, Unaudited: true})),
			method("QuietStart", rule(&optionspb.Rule{Callers: clients, Permission: optionspb.Permission_PERMISSION_ADMIN, StartsProcedure: true, Unaudited: true})),
			method("MasterWithPermission", rule(&optionspb.Rule{Callers: optionspb.Callers_CALLERS_MASTERS, Permission: optionspb.Permission_PERMISSION_READ})),
			method("BadKey", rule(&optionspb.Rule{Callers: clients, Permission: optionspb.Permission_PERMISSION_OPERATE, IdempotencyKey: "nounce"})),
		}}},
	}
	rules, err := optionspb.Rules(serviceOf(t, fdp))
	if err == nil {
		t.Fatal("Rules: no error")
	}
	if len(rules) != 1 || rules["/t.S/Good"] == nil || !rules["/t.S/Good"].Audited() {
		t.Errorf("Rules kept %v; want /t.S/Good only", rules)
	}
	errorSays(t, err,
		"/t.S/Bare has no (baton.options.v1.rule) option",
		"/t.S/NoCallers: (baton.options.v1.rule): callers not said",
		"/t.S/NoPermission: (baton.options.v1.rule): callers CLIENTS needs a permission",
		"/t.S/UnauditedRead: (baton.options.v1.rule): unaudited on a method needing PERMISSION_READ",
		"/t.S/QuietStart: (baton.options.v1.rule): starts_procedure on a method not audited",
		"/t.S/MasterWithPermission: (baton.options.v1.rule): callers CALLERS_MASTERS takes no permission",
		`/t.S/BadKey: (baton.options.v1.rule): idempotency_key "nounce" names no string field of t.Req`,
	)
}
