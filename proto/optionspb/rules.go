package optionspb

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FullMethod is a method's name as gRPC gives it to interceptors
// ("/baton.admin.v1.Admin/CreateTable"): what Rules are keyed by.
func FullMethod(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

// Rules reads the rule of every method of each service, keyed by
// FullMethod. Its error names every method without a rule, or with one
// that contradicts itself: a server built on such a table would have to
// guess, so its callers refuse to start instead.
func Rules(services ...protoreflect.ServiceDescriptor) (map[string]*Rule, error) {
	out := map[string]*Rule{}
	var errs []error
	for _, sd := range services {
		ms := sd.Methods()
		for i := range ms.Len() {
			m := ms.Get(i)
			r, err := RuleOf(m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[FullMethod(m)] = r
		}
	}
	return out, errors.Join(errs...)
}

// RuleOf is m's rule, checked.
func RuleOf(m protoreflect.MethodDescriptor) (*Rule, error) {
	opts := m.Options()
	if !proto.HasExtension(opts, E_Rule) {
		return nil, fmt.Errorf("%s has no (baton.options.v1.rule) option: declare who may call it beside its rpc", FullMethod(m))
	}
	r, _ := proto.GetExtension(opts, E_Rule).(*Rule)
	if err := r.check(m); err != nil {
		return nil, fmt.Errorf("%s: (baton.options.v1.rule): %w", FullMethod(m), err)
	}
	return r, nil
}

// Audited says calls of the rule's method are recorded in the audit trail:
// a client's call needing operate or more, unless the rule says not.
func (r *Rule) Audited() bool {
	return r.GetCallers() == Callers_CALLERS_CLIENTS && r.GetPermission() >= Permission_PERMISSION_OPERATE && !r.GetUnaudited()
}

func (r *Rule) check(m protoreflect.MethodDescriptor) error {
	switch r.GetCallers() {
	case Callers_CALLERS_CLIENTS:
		if r.GetPermission() == Permission_PERMISSION_UNSPECIFIED {
			return errors.New("callers CLIENTS needs a permission (PERMISSION_NONE if anyone may call)")
		}
		if _, known := Permission_name[int32(r.GetPermission())]; !known {
			return fmt.Errorf("unknown permission %d", r.GetPermission())
		}
	case Callers_CALLERS_MASTERS, Callers_CALLERS_REGION_SERVERS:
		if r.GetPermission() != Permission_PERMISSION_UNSPECIFIED || r.GetStartsProcedure() || r.GetUnaudited() {
			return fmt.Errorf("callers %s takes no permission, starts_procedure or unaudited: those are clients' rules", r.GetCallers())
		}
	default:
		return errors.New("callers not said (CLIENTS, MASTERS or REGION_SERVERS)")
	}
	if r.GetUnaudited() && r.GetPermission() < Permission_PERMISSION_OPERATE {
		return fmt.Errorf("unaudited on a method needing %s, which is not audited anyway", r.GetPermission())
	}
	if r.GetStartsProcedure() && !r.Audited() {
		return errors.New("starts_procedure on a method not audited: every call that starts procedures is in the audit trail")
	}
	if k := r.GetIdempotencyKey(); k != "" {
		f := m.Input().Fields().ByName(protoreflect.Name(k))
		if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
			return fmt.Errorf("idempotency_key %q names no string field of %s", k, m.Input().FullName())
		}
	}
	return nil
}
