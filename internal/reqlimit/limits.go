// Package reqlimit bounds what a request may carry. Every string, bytes,
// repeated and map field of every request of the admin API, the Master
// service and the region-server protocol declares its limit beside it in
// the .proto file, as a (baton.options.v1.limit) field option; Fields
// reads them all when the package starts. A server checks a request
// against them (Check, through the interceptors of ServerOptions) before
// it does anything with it, so that no caller can have an oversized or
// malformed value stored in the replicated state and rewritten on every
// step. docs/security.md tables the limits and why.
package reqlimit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

// Field is the limit of one field. For a string or bytes field Bytes
// bounds its length; for a repeated field Items bounds its entries and
// Bytes each entry (a string's); for a map Items bounds its entries, Bytes
// each value, and Total all keys and values together (each key is at most
// MaxArgumentKey, an identifier).
// Ident refuses control characters and invisible ones (Invisible): the
// value names someone or something and is printed on terminals and pages,
// where a right-to-left override or a zero-width space would make it read
// as another name.
type Field struct {
	Bytes int
	Items int
	Total int
	Ident bool
}

// classes are the limits most fields share, which a field names by its
// option's class (optionspb.LimitClass), with headroom over what Baton's
// own clients send (docs/security.md says why each).
var classes = map[optionspb.LimitClass]Field{
	// namespaces, tables, clients, tokens (CheckName's 128, with room for
	// "ns:" before a table).
	optionspb.LimitClass_LIMIT_CLASS_NAME: {Bytes: 260, Ident: true},
	// "ns:table,00042,<proc id>", two names and two numbers.
	optionspb.LimitClass_LIMIT_CLASS_REGION: {Bytes: 512, Ident: true},
	// owners, holders, nonces, callers, server and node ids.
	optionspb.LimitClass_LIMIT_CLASS_IDENT: {Bytes: 256, Ident: true},
	// host:port, a DNS name up to 253 bytes.
	optionspb.LimitClass_LIMIT_CLASS_ADDR: {Bytes: 300, Ident: true},
	// a state, kind, type or permission word.
	optionspb.LimitClass_LIMIT_CLASS_ENUM: {Bytes: 64, Ident: true},
	// an opaque page token (an id, a name, a record key).
	optionspb.LimitClass_LIMIT_CLASS_TOKEN: {Bytes: 1024, Ident: true},
	// free text for people (a description, a reason, an error).
	optionspb.LimitClass_LIMIT_CLASS_TEXT: {Bytes: 4096},
}

// Limits of a procedure's arguments (SubmitProcedureRequest.arguments,
// whose option says the same; a test holds them together): the built-in
// and example types take a handful of short values.
const (
	MaxArguments      = 64
	MaxArgumentKey    = 128
	MaxArgumentValue  = 16 << 10
	MaxArgumentsTotal = 64 << 10
)

// services are the services whose requests Fields bounds.
func services() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		adminpb.File_admin_proto.Services().ByName("Admin"),
		rspb.File_regionserver_proto.Services().ByName("Master"),
		rspb.File_regionserver_proto.Services().ByName("RegionServer"),
	}
}

// Fields holds every limited field of every request of the admin API, the
// Master service and the RegionServer service by its full protobuf name,
// read from the (baton.options.v1.limit) each declares beside it in its
// .proto file.
//
// A field without a usable limit panics here, as the package starts,
// rather than being served with a default or making Check return an
// error: the options are compiled into the binary, so no input or
// configuration can make reading them fail or succeed, and the panic,
// naming the field, stops every test and binary that imports this package
// at once (every server, the CLI), where a default would quietly bound a
// new field by a guess and an error would put a branch that can never be
// taken at each of Check's callers.
var Fields = mustFields(services()...)

func mustFields(sds ...protoreflect.ServiceDescriptor) map[protoreflect.FullName]Field {
	fs, err := fieldsOf(sds...)
	if err != nil {
		panic(fmt.Sprintf("reqlimit: %v", err))
	}
	return fs
}

// fieldsOf reads the limits of the services' request fields; its error
// names every field without one, or whose class has no numbers here.
func fieldsOf(sds ...protoreflect.ServiceDescriptor) (map[protoreflect.FullName]Field, error) {
	lims, err := optionspb.Limits(sds...)
	errs := []error{err}
	out := make(map[protoreflect.FullName]Field, len(lims))
	names := make([]protoreflect.FullName, 0, len(lims))
	for name := range lims {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f, err := fieldOf(lims[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: (baton.options.v1.limit): %w", name, err))
			continue
		}
		out[name] = f
	}
	return out, errors.Join(errs...)
}

// fieldOf is the limit l declares: its class's bytes and ident, its own
// items and total, or all four its own.
func fieldOf(l *optionspb.Limit) (Field, error) {
	f := Field{Bytes: int(l.GetBytes()), Ident: l.GetIdent()}
	if c := l.GetClass(); c != optionspb.LimitClass_LIMIT_CLASS_UNSPECIFIED {
		var ok bool
		if f, ok = classes[c]; !ok {
			return Field{}, fmt.Errorf("class %s has no numbers in reqlimit", c)
		}
	}
	f.Items, f.Total = int(l.GetItems()), int(l.GetTotal())
	return f, nil
}

// fallback bounds a field of a request of none of those services, which a
// server checks all the same (gRPC's health and reflection requests):
// tight, as none of those carries much.
var fallback = Field{Bytes: 256, Items: 100, Total: 4096, Ident: true}

// Check checks req against Fields, its nested messages included, and
// returns an INVALID_ARGUMENT status naming the first field out of bounds
// and its limit.
func Check(req proto.Message) error {
	if err := checkMessage(req.ProtoReflect()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// fieldError is a field out of bounds. Check runs on every request, so
// the field's path is put together only when one is: each level of the
// walk puts its part in front as the error comes back up.
type fieldError struct {
	path string // from the field the error came up to; "" at the field out of bounds
	msg  string
}

func (e *fieldError) Error() string { return e.path + ": " + e.msg }

func outOfBounds(format string, args ...any) error {
	return &fieldError{msg: fmt.Sprintf(format, args...)}
}

// under puts part (a field's name, an entry's "[i]") in front of err's
// path.
func under(part string, err error) error {
	e, ok := err.(*fieldError)
	if !ok {
		return err
	}
	switch {
	case e.path == "" || e.path[0] == '[' || e.path[0] == ' ':
		e.path = part + e.path
	default:
		e.path = part + "." + e.path
	}
	return e
}

func checkMessage(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if err = checkField(fd, v); err != nil {
			err = under(string(fd.Name()), err)
		}
		return err == nil
	})
	return err
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func limitOf(fd protoreflect.FieldDescriptor) Field {
	if f, ok := Fields[fd.FullName()]; ok {
		return f
	}
	return fallback
}

func checkField(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	lim := limitOf(fd)
	switch {
	case fd.IsMap():
		return checkMap(fd, v.Map(), lim)
	case fd.IsList():
		l := v.List()
		if lim.Items > 0 && l.Len() > lim.Items {
			return outOfBounds("%d entries, at most %d", l.Len(), lim.Items)
		}
		for i := 0; i < l.Len(); i++ {
			if err := checkValue(fd, l.Get(i), lim); err != nil {
				return under(fmt.Sprintf("[%d]", i), err)
			}
		}
		return nil
	default:
		return checkValue(fd, v, lim)
	}
}

func checkMap(fd protoreflect.FieldDescriptor, m protoreflect.Map, lim Field) error {
	if lim.Items > 0 && m.Len() > lim.Items {
		return outOfBounds("%d entries, at most %d", m.Len(), lim.Items)
	}
	total := 0
	var err error
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		key := k.String()
		total += len(key)
		if len(key) > MaxArgumentKey {
			err = outOfBounds("key %.40q... is %d bytes, at most %d", key, len(key), MaxArgumentKey)
			return false
		}
		if err = checkText(key, Field{Bytes: MaxArgumentKey, Ident: true}); err != nil {
			err = under(" key", err)
			return false
		}
		if fd.MapValue().Kind() == protoreflect.StringKind {
			total += len(v.String())
			err = checkText(v.String(), Field{Bytes: lim.Bytes})
		} else if fd.MapValue().Kind() == protoreflect.MessageKind {
			err = checkMessage(v.Message())
		}
		if err != nil {
			err = under(fmt.Sprintf("[%q]", key), err)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if lim.Total > 0 && total > lim.Total {
		return outOfBounds("%d bytes in all, at most %d", total, lim.Total)
	}
	return nil
}

func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, lim Field) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return checkText(v.String(), lim)
	case protoreflect.BytesKind:
		if n := len(v.Bytes()); n > lim.Bytes {
			return outOfBounds("%d bytes, at most %d", n, lim.Bytes)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message())
	}
	return nil
}

func checkText(s string, lim Field) error {
	if len(s) > lim.Bytes {
		return outOfBounds("%d bytes, at most %d", len(s), lim.Bytes)
	}
	if lim.Ident {
		if i := firstInvisible(s); i >= 0 {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return outOfBounds("%s %+q at byte %d: not allowed in an identifier", invisibleKind(r), r, i)
		}
	}
	return nil
}

// Invisible says r is not shown as itself: a control character (Cc: an
// escape sequence's ESC, a newline), a format character (Cf: the bidi
// overrides and isolates U+202A-202E and U+2066-2069, the zero-width
// U+200B-200F, U+2060 and U+FEFF, tag characters) or a line or paragraph
// separator (U+2028, U+2029, which some terminals break lines at).
func Invisible(r rune) bool {
	if uint32(r) < utf8.RuneSelf {
		// ASCII's only invisible runes are its controls (C0 and DEL); the
		// tables' lookup cost every check of every request's text.
		return r < 0x20 || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// firstInvisible is strings.IndexFunc(s, Invisible): printable ASCII,
// what nearly every request's text is, is passed over a byte at a time.
func firstInvisible(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			if j := strings.IndexFunc(s[i:], Invisible); j >= 0 {
				return i + j
			}
			return -1
		}
		if Invisible(rune(c)) {
			return i
		}
	}
	return -1
}

func invisibleKind(r rune) string {
	if unicode.IsControl(r) {
		return "control character"
	}
	return "invisible character"
}
