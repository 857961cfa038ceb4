package reqlimit

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

// limitedFields calls fn with every string, bytes, repeated and map field
// of every request of the services, nested messages included.
func limitedFields(fn func(protoreflect.FieldDescriptor)) {
	optionspb.RequestFields(fn, services()...)
}

// TestEveryRequestFieldHasALimit: a request field that can grow declares
// its limit in its .proto file (Fields holds it, or the package would not
// have started), and every limit declared in the protos sits on such a
// field: one on an answer's field would bound nothing.
func TestEveryRequestFieldHasALimit(t *testing.T) {
	found := map[protoreflect.FullName]bool{}
	limitedFields(func(fd protoreflect.FieldDescriptor) {
		found[fd.FullName()] = true
		f, ok := Fields[fd.FullName()]
		switch {
		case !ok:
			t.Errorf("%s has no limit: declare it beside the field, (baton.options.v1.limit), and in docs/security.md", fd.FullName())
		case (fd.IsList() || fd.IsMap()) && f.Items == 0:
			t.Errorf("%s: a repeated field needs Items", fd.FullName())
		case (fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind) && f.Bytes == 0:
			t.Errorf("%s: a text field needs Bytes", fd.FullName())
		}
	})
	for name := range Fields {
		if !found[name] {
			t.Errorf("reqlimit.Fields lists %s, which no request has", name)
		}
	}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			for j := range md.Fields().Len() {
				fd := md.Fields().Get(j)
				if proto.HasExtension(fd.Options(), optionspb.E_Limit) && !found[fd.FullName()] {
					t.Errorf("%s declares a limit, but no request of the services holds it", fd.FullName())
				}
			}
			walk(md.Messages())
		}
	}
	walk(adminpb.File_admin_proto.Messages())
	walk(rspb.File_regionserver_proto.Messages())
	if args := Fields["baton.admin.v1.SubmitProcedureRequest.arguments"]; args != (Field{Items: MaxArguments, Bytes: MaxArgumentValue, Total: MaxArgumentsTotal}) {
		t.Errorf("SubmitProcedureRequest.arguments: %v in admin.proto; MaxArguments, MaxArgumentValue and MaxArgumentsTotal say otherwise", args)
	}
}

// TestAFieldWithoutALimitStopsThePackage: a request field declared without
// a limit, or with a class reqlimit has no numbers for, panics as Fields is
// read, naming the field.
func TestAFieldWithoutALimitStopsThePackage(t *testing.T) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	field := func(name string, l *optionspb.Limit) *descriptorpb.FieldDescriptorProto {
		fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(int32(len(name))), Type: str, Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
		if l != nil {
			fd.Options = &descriptorpb.FieldOptions{}
			proto.SetExtension(fd.Options, optionspb.E_Limit, l)
		}
		return fd
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("reqlimit_t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			field("owner", &optionspb.Limit{Class: optionspb.LimitClass_LIMIT_CLASS_IDENT}),
			field("bare", nil),
			field("future", &optionspb.Limit{Class: optionspb.LimitClass(99)}),
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Call"), InputType: proto.String(".t.Req"), OutputType: proto.String(".t.Req")},
		}}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		msg := fmt.Sprint(recover())
		for _, want := range []string{"t.Req.bare has no (baton.options.v1.limit) option", "t.Req.future: (baton.options.v1.limit): unknown class 99"} {
			if !strings.Contains(msg, want) {
				t.Errorf("panic %q lacks %q", msg, want)
			}
		}
		if strings.Contains(msg, "t.Req.owner") {
			t.Errorf("panic %q names t.Req.owner, which has a limit", msg)
		}
	}()
	mustFields(fd.Services().Get(0))
	t.Error("mustFields: no panic")
}

func TestCheckNamesTheFieldAndItsLimit(t *testing.T) {
	cases := []struct {
		req  interface{ ProtoReflect() protoreflect.Message }
		want string
	}{
		{&adminpb.SubmitProcedureRequest{Type: "sleep", Owner: strings.Repeat("o", 1<<20)}, "owner: 1048576 bytes, at most 256"},
		{&adminpb.SubmitProcedureRequest{Type: "sleep", Owner: "me\n\x1b[31m"}, "owner: control character"},
		{&adminpb.SubmitProcedureRequest{Type: "sleep", Owner: "alice\u202e\u2066nimda"}, `owner: invisible character '\u202e' at byte 5`},
		{&adminpb.SubmitProcedureRequest{Type: "sleep", Owner: "ali\u200bce"}, `owner: invisible character '\u200b'`},
		{&adminpb.AclGrantRequest{Client: "bob\ufeff", Permission: "read"}, `client: invisible character '\ufeff'`},
		{&adminpb.AcquireLockRequest{Holder: "h", Description: strings.Repeat("d", 5000)}, "description: 5000 bytes, at most 4096"},
		{&adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"a": strings.Repeat("v", 40000), "b": strings.Repeat("v", 1000)}}, "arguments[\"a\"]: 40000 bytes"},
		{&adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{}, {Principal: strings.Repeat("p", 300)}}}, "records[1].principal: 300 bytes, at most 256"},
		{&rspb.BatchRequest{Ops: make([]*rspb.RegionOp, 9000)}, "ops: 9000 entries, at most 8192"},
	}
	for _, c := range cases {
		err := Check(c.req.ProtoReflect().Interface())
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%T): %v, want INVALID_ARGUMENT with %q", c.req, err, c.want)
		}
	}
	total := map[string]string{}
	for i := 0; i < 5; i++ {
		total[string(rune('a'+i))] = strings.Repeat("v", 15000)
	}
	if err := Check(&adminpb.SubmitProcedureRequest{Type: "t", Arguments: total}); err == nil || !strings.Contains(err.Error(), "at most 65536") {
		t.Errorf("arguments of 75,000 bytes in all: %v, want refused", err)
	}
	ok := &adminpb.SubmitProcedureRequest{Type: "sleep", Owner: "ops@host:42", Nonce: "c-0123", Arguments: map[string]string{"steps": "3", "delay": "1s"}}
	if err := Check(ok); err != nil {
		t.Errorf("an ordinary submission: %v", err)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                        "plain",
		"héllo ✓":                      "héllo ✓",
		"me\n\x1b[31mred":              `me\n\x1b[31mred`,
		"bad\xffbyte\u0085":            `bad\xffbyte\u0085`,
		"alice\u202e\u2066nimda\u200b": `alice\u202e\u2066nimda\u200b`,
		"zw\u200d\ufeff\u2028":         `zw\u200d\ufeff\u2028`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
