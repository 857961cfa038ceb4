package optionspb_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/proto/optionspb"
)

// TestEveryRequestFieldHasALimit: every string, bytes, repeated and map
// field of every request of every service declares its limit beside it,
// and no limit leaves part of its field unbounded. A field added without
// one fails here (and stops internal/reqlimit as it starts).
func TestEveryRequestFieldHasALimit(t *testing.T) {
	lims, err := optionspb.Limits(services()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(lims) < 90 {
		t.Fatalf("Limits: %d fields; the walk misses requests", len(lims))
	}
}

// TestLimitsRefuseAFieldWithoutALimit: a request field with no limit, or
// with one that leaves part of it unbounded or says two things at once, is
// named in Limits' error and left out of its table; a nested message's
// fields are walked, each once.
func TestLimitsRefuseAFieldWithoutALimit(t *testing.T) {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	n := int32(0)
	field := func(name string, label *descriptorpb.FieldDescriptorProto_Label, typ *descriptorpb.FieldDescriptorProto_Type, l *optionspb.Limit) *descriptorpb.FieldDescriptorProto {
		n++
		fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ, Label: label, JsonName: proto.String(name)}
		if l != nil {
			fd.Options = &descriptorpb.FieldOptions{}
			proto.SetExtension(fd.Options, optionspb.E_Limit, l)
		}
		return fd
	}
	ident := optionspb.LimitClass_LIMIT_CLASS_IDENT
	sub := field("sub", opt, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), nil)
	sub.TypeName = proto.String(".t.Sub")
	subs := field("subs", rep, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), &optionspb.Limit{Items: 4})
	subs.TypeName = proto.String(".t.Sub")
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("limits_t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				field("good", opt, str, &optionspb.Limit{Class: ident}),
				field("own", opt, str, &optionspb.Limit{Bytes: 10, Ident: true}),
				field("bare", opt, str, nil),
				field("count", opt, descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), nil),
				field("both", opt, str, &optionspb.Limit{Class: ident, Bytes: 10}),
				field("unbounded", rep, str, &optionspb.Limit{Class: ident}),
				field("nobytes", opt, str, &optionspb.Limit{Ident: true}),
				field("itemsonone", opt, str, &optionspb.Limit{Class: ident, Items: 3}),
				field("wordy", opt, descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), &optionspb.Limit{Bytes: 3}),
				sub, subs,
			}},
			{Name: proto.String("Sub"), Field: []*descriptorpb.FieldDescriptorProto{
				field("deep", opt, str, nil),
			}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Call"), InputType: proto.String(".t.Req"), OutputType: proto.String(".t.Req")},
		}}},
	}
	svc := serviceOf(t, fdp)
	lims, err := optionspb.Limits(svc)
	if err == nil {
		t.Fatal("Limits: no error")
	}
	if len(lims) != 3 || lims["t.Req.good"] == nil || lims["t.Req.own"] == nil || lims["t.Req.subs"] == nil {
		t.Errorf("Limits kept %v; want t.Req.good, t.Req.own and t.Req.subs", lims)
	}
	errorSays(t, err,
		"t.Req.bare has no (baton.options.v1.limit) option",
		"t.Req.both: (baton.options.v1.limit): class LIMIT_CLASS_IDENT gives bytes and ident",
		"t.Req.unbounded: (baton.options.v1.limit): a repeated or map field needs items",
		"t.Req.nobytes: (baton.options.v1.limit): a string or bytes field needs a class or bytes",
		"t.Req.itemsonone: (baton.options.v1.limit): items on a field that is not repeated",
		"t.Sub.deep has no (baton.options.v1.limit) option",
	)
	if strings.Count(err.Error(), "t.Sub.deep") != 1 || strings.Contains(err.Error(), "t.Req.count") || strings.Contains(err.Error(), "t.Req.wordy") {
		t.Errorf("error names a field it should not, or one twice:\n%v", err)
	}
	// A field that cannot grow is not walked, so a limit on it is refused
	// only when read directly.
	if _, err := optionspb.LimitOf(svc.ParentFile().Messages().ByName("Req").Fields().ByName("wordy")); err == nil || !strings.Contains(err.Error(), "cannot grow") {
		t.Errorf("LimitOf(t.Req.wordy): %v", err)
	}
}
