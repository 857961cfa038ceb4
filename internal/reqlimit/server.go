package reqlimit

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ServerOptions checks every request a gRPC server receives against
// Fields before its handler (and any interceptor chained after these)
// sees it, and answers a string that is not UTF-8 with INVALID_ARGUMENT
// naming the field, where gRPC's own decoding answers INTERNAL.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{inner: encoding.GetCodecV2(protocodec.Name)}),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(StreamServerInterceptor()),
	}
}

// UnaryServerInterceptor refuses a request out of Fields' bounds.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkRequest(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor refuses a stream's request out of Fields'
// bounds as it is received.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, checkedStream{ss})
	}
}

type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkRequest(m)
}

func checkRequest(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if path, bad := takeInvalidUTF8(m); bad {
		return status.Errorf(codes.InvalidArgument, "%s: not valid UTF-8", path)
	}
	return Check(m)
}

// invalidUTF8Field is the field number under which codec notes, in the
// decoded message's unknown fields, the first string that was not UTF-8:
// the note travels with the request to the interceptor, and goes with it.
// The highest field number there is, which no Baton message will use.
const invalidUTF8Field protowire.Number = protowire.MaxValidNumber

// codec is gRPC's proto codec, except that a request holding a string that
// is not valid UTF-8 decodes (the bad bytes replaced) with a note of the
// field, for the interceptor to refuse it as INVALID_ARGUMENT: gRPC answers
// any decoding error INTERNAL, which is for the server's faults.
type codec struct{ inner encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.inner.Marshal(v) }
func (c codec) Name() string                           { return c.inner.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.inner.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok || !strings.Contains(err.Error(), "UTF-8") {
		return err
	}
	var path string
	fixed, serr := validUTF8(data.Materialize(), m.ProtoReflect().Descriptor(), "", &path)
	if serr != nil || path == "" {
		return err
	}
	if uerr := proto.Unmarshal(fixed, m); uerr != nil {
		return err
	}
	r := m.ProtoReflect()
	note := protowire.AppendTag(nil, invalidUTF8Field, protowire.BytesType)
	r.SetUnknown(append(r.GetUnknown(), protowire.AppendString(note, path)...))
	return nil
}

// takeInvalidUTF8 returns the field codec noted, removing the note.
func takeInvalidUTF8(m proto.Message) (string, bool) {
	r := m.ProtoReflect()
	unknown := r.GetUnknown()
	for b := unknown; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		size := protowire.ConsumeFieldValue(num, typ, b[n:])
		if size < 0 {
			return "", false
		}
		if num == invalidUTF8Field && typ == protowire.BytesType {
			path, _ := protowire.ConsumeString(b[n:])
			return path, true
		}
		b = b[n+size:]
	}
	return "", false
}

// validUTF8 copies the wire bytes b of a message md, replacing the bytes
// of every string field that are not UTF-8, and sets *path to the first
// such field.
func validUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string, path *string) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		size := protowire.ConsumeFieldValue(num, typ, b[n:])
		if size < 0 {
			return nil, protowire.ParseError(size)
		}
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			out = append(out, b[:n+size]...)
			b = b[n+size:]
			continue
		}
		v, _ := protowire.ConsumeBytes(b[n:])
		name := joinPath(prefix, string(fd.Name()))
		if fd.Kind() == protoreflect.StringKind {
			if !utf8.Valid(v) {
				if *path == "" {
					*path = name
				}
				v = []byte(strings.ToValidUTF8(string(v), "\uFFFD"))
			}
		} else {
			var err error
			if v, err = validUTF8(v, fd.Message(), name, path); err != nil {
				return nil, err
			}
		}
		out = protowire.AppendTag(out, num, typ)
		out = protowire.AppendBytes(out, v)
		b = b[n+size:]
	}
	return out, nil
}

// String is for the tests' messages.
func (f Field) String() string {
	return fmt.Sprintf("bytes %d, items %d, total %d, ident %v", f.Bytes, f.Items, f.Total, f.Ident)
}
