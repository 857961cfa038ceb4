package admin

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/security"
)

// methodRule is what the interceptors need of an admin method's rule
// (admin.proto's baton.options.v1.rule option).
type methodRule struct {
	clientMay bool                // false: masters only
	perm      security.Permission // what a client needs
	audited   bool                // recorded in the audit trail, counted by the change limit
	submits   bool                // starts procedures: counted by the submit rate limit
}

// adminRules are the admin service's rules by full method name, read
// once from admin.proto's options. rulesErr names each method without a
// rule (or with one the interceptors cannot follow): New refuses to start
// rather than guess what such a method needs.
var adminRules, rulesErr = loadRules(adminpb.File_admin_proto.Services().ByName("Admin"))

func loadRules(sd protoreflect.ServiceDescriptor) (map[string]methodRule, error) {
	rs, err := optionspb.Rules(sd)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make(map[string]methodRule, len(rs))
	for full, r := range rs {
		switch r.GetCallers() {
		case optionspb.Callers_CALLERS_CLIENTS:
			out[full] = methodRule{clientMay: true, perm: permissionOf(r.GetPermission()), audited: r.Audited(), submits: r.GetStartsProcedure()}
		case optionspb.Callers_CALLERS_MASTERS:
			out[full] = methodRule{}
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
func adminMethods(want func(methodRule) bool) []string {
	var out []string
	for full, r := range adminRules {
		if want(r) {
			out = append(out, strings.TrimPrefix(full, security.AdminService))
		}
	}
	slices.Sort(out)
	return out
}
