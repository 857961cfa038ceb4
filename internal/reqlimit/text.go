package reqlimit

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Escape makes s safe to print on a terminal: a control character (an
// escape sequence's ESC, a newline that would forge a line of output) or
// another invisible one (Invisible: a right-to-left override that would
// make a name read backwards, a zero-width space) is written as Go escapes
// it (\x1b, \n, \u0085, \u202e), and so is a byte that is not UTF-8;
// everything else is left as it is. Records stored before
// Baton refused control characters in identifiers may still hold some.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case Invisible(r):
			q := fmt.Sprintf("%+q", string(r))
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	return firstInvisible(s) >= 0
}

// EscapeMessage escapes, as Escape does, every string of m and of the
// messages it holds (map values too), in place: for a program that prints
// answers as text, whatever field it prints.
func EscapeMessage(m proto.Message) {
	escapeMessage(m.ProtoReflect())
}

func escapeMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			mp := v.Map()
			var bad []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch {
				case fd.MapValue().Kind() == protoreflect.StringKind:
					mp.Set(k, protoreflect.ValueOfString(Escape(mv.String())))
				case fd.MapValue().Message() != nil:
					escapeMessage(mv.Message())
				}
				if fd.MapKey().Kind() == protoreflect.StringKind && needsEscape(k.String()) {
					bad = append(bad, k)
				}
				return true
			})
			for _, k := range bad {
				mv := mp.Get(k)
				mp.Clear(k)
				mp.Set(protoreflect.ValueOfString(Escape(k.String())).MapKey(), mv)
			}
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(Escape(l.Get(i).String())))
				} else if fd.Message() != nil {
					escapeMessage(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); needsEscape(s) {
				m.Set(fd, protoreflect.ValueOfString(Escape(s)))
			}
		case fd.Message() != nil:
			escapeMessage(v.Message())
		}
		return true
	})
}

// EscapeAnswers are dial options that escape every string of every answer
// (EscapeMessage) and of every error's message, for a client that prints
// them as text.
func EscapeAnswers() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if m, ok := reply.(proto.Message); ok && err == nil {
				EscapeMessage(m)
			}
			return escapeError(err)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, escapeError(err)
			}
			return escapingStream{cs}, nil
		}),
	}
}

type escapingStream struct{ grpc.ClientStream }

func (s escapingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if pm, ok := m.(proto.Message); ok && err == nil {
		EscapeMessage(pm)
	}
	return escapeError(err)
}

func escapeError(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || !needsEscape(st.Message()) {
		return err
	}
	p := st.Proto()
	p.Message = Escape(p.GetMessage())
	return status.ErrorProto(p)
}
