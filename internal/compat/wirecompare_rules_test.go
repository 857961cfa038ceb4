package compat_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

type fdp = descriptorpb.FieldDescriptorProto

func field(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *fdp {
	f := &fdp{
		Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
	}
	if typeName != "" {
		f.TypeName = proto.String(typeName)
	}
	return f
}

func repeated(f *fdp) *fdp {
	f.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	return f
}

func inOneof(f *fdp, index int32) *fdp {
	f.OneofIndex = proto.Int32(index)
	return f
}

const (
	tString  = descriptorpb.FieldDescriptorProto_TYPE_STRING
	tBytes   = descriptorpb.FieldDescriptorProto_TYPE_BYTES
	tInt32   = descriptorpb.FieldDescriptorProto_TYPE_INT32
	tInt64   = descriptorpb.FieldDescriptorProto_TYPE_INT64
	tUint64  = descriptorpb.FieldDescriptorProto_TYPE_UINT64
	tSint64  = descriptorpb.FieldDescriptorProto_TYPE_SINT64
	tFixed64 = descriptorpb.FieldDescriptorProto_TYPE_FIXED64
	tSfixed  = descriptorpb.FieldDescriptorProto_TYPE_SFIXED64
	tBool    = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	tEnum    = descriptorpb.FieldDescriptorProto_TYPE_ENUM
	tMessage = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
)

// releasedFile is a small schema with one of each thing compareWire looks
// at, standing in for a release's.
func releasedFile() *descriptorpb.FileDescriptorProto {
	return &descriptorpb.FileDescriptorProto{
		Name: proto.String("t/wire.proto"), Package: proto.String("t.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name: proto.String("Req"),
				Field: []*fdp{
					field("id", 1, tUint64, ""),
					field("name", 2, tString, ""),
					repeated(field("tags", 3, tString, "")),
					field("state", 4, tEnum, ".t.v1.State"),
					field("inner", 5, tMessage, ".t.v1.Resp"),
					field("count", 6, tInt32, ""),
					inOneof(field("by_name", 7, tString, ""), 0),
					inOneof(field("by_id", 8, tUint64, ""), 0),
					repeated(field("labels", 9, tMessage, ".t.v1.Req.LabelsEntry")),
					field("stamp", 10, tFixed64, ""),
					repeated(field("shards", 11, tUint64, "")),
				},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("target")}},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name:    proto.String("LabelsEntry"),
					Field:   []*fdp{field("key", 1, tString, ""), field("value", 2, tInt32, "")},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				}},
				ReservedRange: []*descriptorpb.DescriptorProto_ReservedRange{{Start: proto.Int32(20), End: proto.Int32(22)}},
			},
			{Name: proto.String("Resp"), Field: []*fdp{field("ok", 1, tBool, "")}},
			{Name: proto.String("Extra")},
		},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("State"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("STATE_UNKNOWN"), Number: proto.Int32(0)},
				{Name: proto.String("STATE_RUNNING"), Number: proto.Int32(1)},
				{Name: proto.String("STATE_DONE"), Number: proto.Int32(2)},
			},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Svc"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Get"), InputType: proto.String(".t.v1.Req"), OutputType: proto.String(".t.v1.Resp")},
				{Name: proto.String("Watch"), InputType: proto.String(".t.v1.Req"), OutputType: proto.String(".t.v1.Resp"), ServerStreaming: proto.Bool(true)},
			},
		}},
	}
}

func req(f *descriptorpb.FileDescriptorProto) *descriptorpb.DescriptorProto { return f.MessageType[0] }

func reqField(f *descriptorpb.FileDescriptorProto, num int32) *fdp {
	for _, fd := range req(f).Field {
		if fd.GetNumber() == num {
			return fd
		}
	}
	panic("no such field")
}

func dropField(f *descriptorpb.FileDescriptorProto, num int32) {
	req(f).Field = slices.DeleteFunc(req(f).Field, func(fd *fdp) bool { return fd.GetNumber() == num })
}

func reserve(f *descriptorpb.FileDescriptorProto, num int32) {
	req(f).ReservedRange = append(req(f).ReservedRange, &descriptorpb.DescriptorProto_ReservedRange{Start: proto.Int32(num), End: proto.Int32(num + 1)})
}

// TestCompareWireRules: compareWire on a hand-made release and a changed
// copy of it: the changes peers of both survive pass, each breaking one is
// reported by name and number.
func TestCompareWireRules(t *testing.T) {
	cases := []struct {
		name   string
		change func(f *descriptorpb.FileDescriptorProto)
		want   []string // a problem starting with each; none: compatible
	}{
		{name: "unchanged", change: func(*descriptorpb.FileDescriptorProto) {}},

		// Compatible.
		{name: "field renamed", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 2).Name = proto.String("title") }},
		{name: "int32 widened to int64", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 6).Type = tInt64.Enum() }},
		{name: "uint64 to bool (varint group)", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 1).Type = tBool.Enum() }},
		{name: "fixed64 to sfixed64", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 10).Type = tSfixed.Enum() }},
		{name: "removed, number reserved", change: func(f *descriptorpb.FileDescriptorProto) { dropField(f, 6); reserve(f, 6) }},
		{name: "field added", change: func(f *descriptorpb.FileDescriptorProto) {
			req(f).Field = append(req(f).Field, field("more", 13, tString, ""))
		}},
		{name: "new field joins a oneof, oneof renamed", change: func(f *descriptorpb.FileDescriptorProto) {
			// A oneof's fields are declared together: after by_id.
			req(f).Field = slices.Insert(req(f).Field, 8, inOneof(field("by_path", 12, tString, ""), 0))
			req(f).OneofDecl[0].Name = proto.String("which")
		}},
		{name: "repeated scalar no longer packed", change: func(f *descriptorpb.FileDescriptorProto) {
			reqField(f, 11).Options = &descriptorpb.FieldOptions{Packed: proto.Bool(false)} // parsers take both
		}},
		{name: "enum value renamed, value and method added", change: func(f *descriptorpb.FileDescriptorProto) {
			f.EnumType[0].Value[2].Name = proto.String("STATE_FINISHED")
			f.EnumType[0].Value = append(f.EnumType[0].Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String("STATE_FAILED"), Number: proto.Int32(3)})
			f.Service[0].Method = append(f.Service[0].Method, &descriptorpb.MethodDescriptorProto{Name: proto.String("Put"), InputType: proto.String(".t.v1.Req"), OutputType: proto.String(".t.v1.Resp")})
		}},
		{name: "enum value removed, number reserved", change: func(f *descriptorpb.FileDescriptorProto) {
			f.EnumType[0].Value = f.EnumType[0].Value[:2]
			f.EnumType[0].ReservedRange = []*descriptorpb.EnumDescriptorProto_EnumReservedRange{{Start: proto.Int32(2), End: proto.Int32(2)}}
		}},

		// Breaking.
		{name: "string to bytes", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 2).Type = tBytes.Enum() },
			want: []string{"message t.v1.Req field 2 (name): kind string, now bytes"}},
		{name: "varint to zigzag", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 1).Type = tSint64.Enum() },
			want: []string{"message t.v1.Req field 1 (id): kind uint64, now sint64"}},
		{name: "field renumbered", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 2).Number = proto.Int32(12) },
			want: []string{"message t.v1.Req field 2 (name): removed and its number not reserved"}},
		{name: "removed, not reserved", change: func(f *descriptorpb.FileDescriptorProto) { dropField(f, 6) },
			want: []string{"message t.v1.Req field 6 (count): removed and its number not reserved"}},
		{name: "number reused for another kind", change: func(f *descriptorpb.FileDescriptorProto) {
			dropField(f, 6)
			req(f).Field = append(req(f).Field, field("note", 6, tString, ""))
		}, want: []string{"message t.v1.Req field 6 (count): kind int32, now string"}},
		{name: "reserved number used", change: func(f *descriptorpb.FileDescriptorProto) {
			req(f).ReservedRange = nil
			req(f).Field = append(req(f).Field, field("late", 21, tString, ""))
		}, want: []string{"message t.v1.Req field 21: reserved in the release, now used by late"}},
		{name: "repeated made singular", change: func(f *descriptorpb.FileDescriptorProto) {
			reqField(f, 3).Label = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
		}, want: []string{"message t.v1.Req field 3 (tags): repeated, now singular"}},
		{name: "message type changed", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 5).TypeName = proto.String(".t.v1.Extra") },
			want: []string{"message t.v1.Req field 5 (inner): message t.v1.Resp, now t.v1.Extra"}},
		{name: "map value kind changed", change: func(f *descriptorpb.FileDescriptorProto) {
			req(f).NestedType[0].Field[1].Type = tString.Enum()
		}, want: []string{"message t.v1.Req field 9 (labels) value: kind int32, now string"}},
		{name: "field left its oneof", change: func(f *descriptorpb.FileDescriptorProto) { reqField(f, 7).OneofIndex = nil },
			want: []string{"message t.v1.Req field 7 (by_name): in oneof target, now in none", "message t.v1.Req field 8 (by_id): in oneof target with field 7, now apart from it"}},
		{name: "field moved into a oneof", change: func(f *descriptorpb.FileDescriptorProto) {
			name := reqField(f, 2)
			dropField(f, 2)
			req(f).Field = slices.Insert(req(f).Field, 7, inOneof(name, 0)) // after by_id
		},
			want: []string{"message t.v1.Req field 2 (name): in no oneof, now in oneof target"}},
		{name: "message removed", change: func(f *descriptorpb.FileDescriptorProto) { f.MessageType = f.MessageType[:2] },
			want: []string{"message t.v1.Extra: gone"}},
		{name: "enum value removed, not reserved", change: func(f *descriptorpb.FileDescriptorProto) { f.EnumType[0].Value = f.EnumType[0].Value[:2] },
			want: []string{"enum t.v1.State value 2 (STATE_DONE): removed and its number not reserved"}},
		{name: "method removed", change: func(f *descriptorpb.FileDescriptorProto) { f.Service[0].Method = f.Service[0].Method[1:] },
			want: []string{"service t.v1.Svc method Get: gone"}},
		{name: "streaming changed", change: func(f *descriptorpb.FileDescriptorProto) { f.Service[0].Method[1].ServerStreaming = nil },
			want: []string{"service t.v1.Svc method Watch: client streaming false, server streaming true, now client streaming false, server streaming false"}},
		{name: "request type changed", change: func(f *descriptorpb.FileDescriptorProto) {
			f.Service[0].Method[0].InputType = proto.String(".t.v1.Extra")
		},
			want: []string{"service t.v1.Svc method Get: request t.v1.Req, now t.v1.Extra"}},
		{name: "service renamed", change: func(f *descriptorpb.FileDescriptorProto) { f.Service[0].Name = proto.String("Service") },
			want: []string{"service t.v1.Svc: gone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := releasedFile()
			cur := proto.Clone(release).(*descriptorpb.FileDescriptorProto)
			tc.change(cur)
			got := compareWire(buildFiles(t, release), buildFiles(t, cur))
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, w) }) {
					t.Errorf("want a problem %q, got %q", w, got)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %d problems %q, want %d", len(got), got, len(tc.want))
			}
		})
	}
}
