package optionspb

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Limited says fd is a field a request could make grow without bound (a
// string, bytes, repeated or map field), which must declare its limit.
func Limited(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind || fd.IsList() || fd.IsMap()
}

// RequestFields calls fn with every field that must declare a limit (Limited)
// of every request of each service, the messages a request holds included
// (those of a map's values too), each once.
func RequestFields(fn func(protoreflect.FieldDescriptor), services ...protoreflect.ServiceDescriptor) {
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fs := md.Fields()
		for i := range fs.Len() {
			fd := fs.Get(i)
			if Limited(fd) {
				fn(fd)
			}
			switch {
			case fd.IsMap():
				if v := fd.MapValue().Message(); v != nil {
					walk(v)
				}
			case fd.Message() != nil:
				walk(fd.Message())
			}
		}
	}
	for _, sd := range services {
		ms := sd.Methods()
		for i := range ms.Len() {
			walk(ms.Get(i).Input())
		}
	}
}

// Limits reads the limit of every field of every request of each service
// that must declare one (RequestFields), keyed by the field's full name.
// Its error names every such field without a limit, or with one that
// leaves part of the field unbounded: a server checking requests against
// such a table would have to guess, so its callers refuse to start
// instead.
func Limits(services ...protoreflect.ServiceDescriptor) (map[protoreflect.FullName]*Limit, error) {
	out := map[protoreflect.FullName]*Limit{}
	var errs []error
	RequestFields(func(fd protoreflect.FieldDescriptor) {
		l, err := LimitOf(fd)
		if err != nil {
			errs = append(errs, err)
			return
		}
		out[fd.FullName()] = l
	}, services...)
	return out, errors.Join(errs...)
}

// LimitOf is fd's (baton.options.v1.limit), checked: a limit that leaves
// part of the field unbounded, or says two things at once, is an error.
func LimitOf(fd protoreflect.FieldDescriptor) (*Limit, error) {
	opts := fd.Options()
	if !proto.HasExtension(opts, E_Limit) {
		return nil, fmt.Errorf("%s has no (baton.options.v1.limit) option: declare its limit beside the field", fd.FullName())
	}
	l, _ := proto.GetExtension(opts, E_Limit).(*Limit)
	if err := l.check(fd); err != nil {
		return nil, fmt.Errorf("%s: (baton.options.v1.limit): %w", fd.FullName(), err)
	}
	return l, nil
}

func (l *Limit) check(fd protoreflect.FieldDescriptor) error {
	if _, known := LimitClass_name[int32(l.GetClass())]; !known {
		return fmt.Errorf("unknown class %d", l.GetClass())
	}
	shared := l.GetClass() != LimitClass_LIMIT_CLASS_UNSPECIFIED
	if shared && (l.GetBytes() != 0 || l.GetIdent()) {
		return fmt.Errorf("class %s gives bytes and ident: set only items and total beside it", l.GetClass())
	}
	text := fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind
	if fd.IsMap() {
		text = fd.MapValue().Kind() == protoreflect.StringKind || fd.MapValue().Kind() == protoreflect.BytesKind
	}
	switch {
	case !Limited(fd):
		return errors.New("the field cannot grow: it takes no limit")
	case (fd.IsList() || fd.IsMap()) && l.GetItems() == 0:
		return errors.New("a repeated or map field needs items")
	case !fd.IsList() && !fd.IsMap() && l.GetItems() != 0:
		return errors.New("items on a field that is not repeated")
	case !fd.IsMap() && l.GetTotal() != 0:
		return errors.New("total on a field that is not a map")
	case text && !shared && l.GetBytes() == 0:
		return errors.New("a string or bytes field needs a class or bytes")
	case !text && (shared || l.GetBytes() != 0 || l.GetIdent()):
		return errors.New("class, bytes or ident on a field holding no strings or bytes")
	}
	return nil
}
