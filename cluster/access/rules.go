package access

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/security"
)

// Rule is what the interceptors need of an admin method's rule
// (admin.proto's baton.options.v1.rule option).
type Rule struct {
	ClientMay bool                // false: masters only
	Perm      security.Permission // what a client needs
	Audited   bool                // recorded in the audit trail, counted by the change limit
	Submits   bool                // starts procedures: counted by the submit rate limit
}

// adminRules are the admin service's rules by full method name, read
// once from admin.proto's options. rulesErr names each method without a
// rule (or with one the interceptors cannot follow).
var adminRules, rulesErr = LoadRules(adminpb.File_admin_proto.Services().ByName("Admin"))

// RulesErr names each admin method without a rule, or with one the
// interceptors cannot follow: the admin server refuses to start rather
// than guess what such a method needs.
func RulesErr() error { return rulesErr }

func LoadRules(sd protoreflect.ServiceDescriptor) (map[string]Rule, error) {
	rs, err := optionspb.Rules(sd)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make(map[string]Rule, len(rs))
	for full, r := range rs {
		switch r.GetCallers() {
		case optionspb.Callers_CALLERS_CLIENTS:
			out[full] = Rule{ClientMay: true, Perm: permissionOf(r.GetPermission()), Audited: r.Audited(), Submits: r.GetStartsProcedure()}
		case optionspb.Callers_CALLERS_MASTERS:
			out[full] = Rule{}
		default:
			return nil, fmt.Errorf("admin: %s: callers %s: the admin service serves clients and masters only", full, r.GetCallers())
		}
	}
	return out, nil
}

// permissionOf is security's Permission for a rule's (checked by
// optionspb: never unspecified for a client method).
func permissionOf(p optionspb.Permission) security.Permission {
	switch p {
	case optionspb.Permission_PERMISSION_READ:
		return security.PermRead
	case optionspb.Permission_PERMISSION_OPERATE:
		return security.PermOperate
	case optionspb.Permission_PERMISSION_ADMIN:
		return security.PermAdmin
	}
	return security.PermNone
}

// adminMethods are the short names of the admin methods whose rule
// satisfies want, sorted.
func adminMethods(want func(Rule) bool) []string {
	var out []string
	for full, r := range adminRules {
		if want(r) {
			out = append(out, strings.TrimPrefix(full, security.AdminService))
		}
	}
	slices.Sort(out)
	return out
}

// MasterOnlyMethods are the admin methods (short names) only masters
// call (admin.proto's rules with callers MASTERS).
func MasterOnlyMethods() []string {
	return adminMethods(func(r Rule) bool { return !r.ClientMay })
}

// SubmitMethods are the admin methods that start procedures (admin.proto's
// rules with starts_procedure): what a submit rate limit counts.
func SubmitMethods() []string {
	return adminMethods(func(r Rule) bool { return r.Submits })
}

// AuditedMethods are the admin service's methods the trail records: what
// the change limit counts.
func AuditedMethods() []string {
	var out []string
	for _, m := range adminpb.Admin_ServiceDesc.Methods {
		if Audited(m.MethodName) {
			out = append(out, m.MethodName)
		}
	}
	return out
}

// RuleOf is the rule of an admin method (its short name). One admin.proto
// does not declare, which the service cannot have (the admin server
// refuses to start with a method lacking a rule), is closed: it needs
// admin, and is audited.
func RuleOf(method string) Rule {
	if r, ok := adminRules[security.AdminService+method]; ok {
		return r
	}
	return Rule{ClientMay: true, Perm: security.PermAdmin, Audited: true}
}

// MethodPermission is the permission a client needs to call an admin
// method (its short name, e.g. "CreateTable"); false for a method only
// masters may call.
func MethodPermission(method string) (security.Permission, bool) {
	r := RuleOf(method)
	return r.Perm, r.ClientMay
}

// Audited says calls of method are recorded in the audit trail.
func Audited(method string) bool {
	return RuleOf(method).Audited
}
