package access

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/security"
)

// Authorize decides a call of method by p, with access control enforced
// or not: nil, or the status to answer.
func Authorize(p Principal, method string, enforce bool) error {
	need, clientMay := MethodPermission(method)
	if p.Kind == KindMaster {
		return nil
	}
	if !clientMay {
		if !enforce && p.Kind == KindAnonymous {
			return nil // plaintext without access control: nothing to tell a master by
		}
		return status.Errorf(codes.PermissionDenied, "admin: %s is called only by masters, not by %s", method, p)
	}
	if !enforce {
		return nil
	}
	if p.Kind == KindAnonymous {
		if need == security.PermNone {
			return nil
		}
		return status.Errorf(codes.Unauthenticated, "admin: %s needs permission %s: present a client certificate bound to one ('baton acl grant') or a token (--token, BATON_TOKEN)", method, need)
	}
	if !p.Perm.Covers(need) {
		held := "no permission"
		if p.Perm != security.PermNone {
			held = "permission " + p.Perm.String()
		}
		return status.Errorf(codes.PermissionDenied, "admin: %s needs permission %s; %s holds %s", method, need, p, held)
	}
	return nil
}

// Effective is the permission p may use here: all of it when access
// control is not enforced.
func Effective(p Principal, enforce bool) security.Permission {
	if !enforce || p.Kind == KindMaster {
		return security.PermAdmin
	}
	return p.Perm
}
