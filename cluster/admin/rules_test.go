package admin

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/cluster/access"
)

// TestNewRefusesAMethodWithoutARule: a server whose service has a method
// admin.proto gives no rule does not start, naming the method, rather
// than serve it with a guessed permission.
func TestNewRefusesAMethodWithoutARule(t *testing.T) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("norule_test.proto"), Package: proto.String("norule"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Admin"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Forgotten"), InputType: proto.String(".norule.Req"), OutputType: proto.String(".norule.Req")},
		}}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = access.LoadRules(fd.Services().Get(0))
	if err == nil {
		t.Fatal("LoadRules: a method without a rule was accepted")
	}
	saved := rulesErr
	rulesErr = func() error { return err }
	defer func() { rulesErr = saved }()
	_, err = New(struct{ Backend }{}, Config{})
	if err == nil || !strings.Contains(err.Error(), "/norule.Admin/Forgotten has no (baton.options.v1.rule) option") {
		t.Fatalf("New = %v; want a refusal naming /norule.Admin/Forgotten", err)
	}
}
