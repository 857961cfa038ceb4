package security

import (
	"slices"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestPoliciesFollowTheRules: who MasterPolicy and RegionServerPolicy
// admit to each method of the Master and RegionServer services is what
// the method's rule in regionserver.proto declares: masters only, clients
// (and masters), or region servers each only as itself.
func TestPoliciesFollowTheRules(t *testing.T) {
	svcs := rspb.File_regionserver_proto.Services()
	for _, c := range []struct {
		svc    protoreflect.ServiceDescriptor
		policy *Policy
	}{
		{svcs.ByName("Master"), MasterPolicy()},
		{svcs.ByName("RegionServer"), RegionServerPolicy()},
	} {
		ms := c.svc.Methods()
		for i := range ms.Len() {
			m := ms.Get(i)
			full := optionspb.FullMethod(m)
			r, err := optionspb.RuleOf(m)
			if err != nil {
				t.Error(err)
				continue
			}
			var want rule
			switch r.GetCallers() {
			case optionspb.Callers_CALLERS_MASTERS:
				want = rule{roles: []Role{RoleMaster}}
			case optionspb.Callers_CALLERS_CLIENTS:
				want = rule{roles: []Role{RoleMaster, RoleClient}}
			case optionspb.Callers_CALLERS_REGION_SERVERS:
				want = rule{roles: []Role{RoleRegionServer}, self: true}
			}
			got, ok := c.policy.match(full)
			slices.Sort(got.roles)
			slices.Sort(want.roles)
			if !ok || !slices.Equal(got.roles, want.roles) || got.self != want.self {
				t.Errorf("%s: the policy admits %v (self %v, found %v); its rule says %s: %v (self %v)", full, got.roles, got.self, ok, r.GetCallers(), want.roles, want.self)
			}
		}
	}
}

// TestMethodRulesRefuseAMethodWithoutARule: a service whose methods carry
// no rule (gRPC's health service stands in for a new Baton rpc someone
// forgot to give one) cannot be made into a policy; the error names each
// such method.
func TestMethodRulesRefuseAMethodWithoutARule(t *testing.T) {
	_, err := methodRules(healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health"))
	for _, m := range []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"} {
		if err == nil || !strings.Contains(err.Error(), m+" has no (baton.options.v1.rule) option") {
			t.Errorf("methodRules(Health): %v, want an error naming %s", err, m)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("mustMethodRules(Health) did not panic")
		}
	}()
	mustMethodRules(healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health"))
}
