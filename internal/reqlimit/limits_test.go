package reqlimit

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// services are the three whose requests Fields bounds.
func services() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		adminpb.File_admin_proto.Services().ByName("Admin"),
		rspb.File_regionserver_proto.Services().ByName("Master"),
		rspb.File_regionserver_proto.Services().ByName("RegionServer"),
	}
}

// limitedFields calls fn with every string, bytes, repeated and map field
// of every request of the services, nested messages included.
func limitedFields(fn func(protoreflect.FieldDescriptor)) {
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			if fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind || fd.IsList() || fd.IsMap() {
				fn(fd)
			}
			if fd.Message() != nil && !fd.IsMap() {
				walk(fd.Message())
			}
		}
	}
	for _, sd := range services() {
		for i := 0; i < sd.Methods().Len(); i++ {
			walk(sd.Methods().Get(i).Input())
		}
	}
}

// TestEveryRequestFieldHasALimit: a request field that can grow has a
// limit declared in Fields, and every entry of Fields is such a field.
func TestEveryRequestFieldHasALimit(t *testing.T) {
	found := map[protoreflect.FullName]bool{}
	limitedFields(func(fd protoreflect.FieldDescriptor) {
		found[fd.FullName()] = true
		f, ok := Fields[fd.FullName()]
		switch {
		case !ok:
			t.Errorf("%s has no limit: add it to reqlimit.Fields and to docs/security.md", fd.FullName())
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
