package security

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/rspb"
)

// The cluster's gRPC services, by full name prefix.
const (
	// AdminService is the admin API (proto/adminpb): clients, and masters
	// forwarding a call to the leader or registering their address.
	AdminService = "/baton.admin.v1.Admin/"
	// MasterService is what region servers call on the leader
	// (registration, heartbeats, transition reports).
	MasterService = "/baton.rs.v1.Master/"
	// RegionServerService is what masters call on a region server (batches
	// of opens and closes, the regions it holds).
	RegionServerService = "/baton.rs.v1.RegionServer/"
	// HealthService is gRPC's health check, answered to every party.
	HealthService = "/grpc.health.v1.Health/"
	// ReflectionService is gRPC's server reflection (grpcurl).
	ReflectionService = "/grpc.reflection."
)

// masterRules and regionServerRules admit each method of the Master and
// RegionServer services as its (baton.options.v1.rule) in
// regionserver.proto says. They are read once, when the package starts,
// and a method without a usable rule panics there rather than making
// MasterPolicy return an error: the rules are compiled into the binary,
// so no input or configuration can make them fail or succeed, and the
// panic stops every test and binary that imports this package at once,
// where an error would put a branch that can never be taken at each of
// the policies' callers (and one forgotten check would run a server
// whose new method no one may call).
var (
	masterRules       = mustMethodRules(rspb.File_regionserver_proto.Services().ByName("Master"))
	regionServerRules = mustMethodRules(rspb.File_regionserver_proto.Services().ByName("RegionServer"))
)

func mustMethodRules(sd protoreflect.ServiceDescriptor) []rule {
	rs, err := methodRules(sd)
	if err != nil {
		panic(fmt.Sprintf("security: %v", err))
	}
	return rs
}

// methodRules is who may call each method of sd, from its rule: clients
// (with masters, which may do all a client may), masters, or region
// servers each only as itself. Its error names every method without a
// rule.
func methodRules(sd protoreflect.ServiceDescriptor) ([]rule, error) {
	var out []rule
	var errs []error
	ms := sd.Methods()
	for i := range ms.Len() {
		m := ms.Get(i)
		r, err := optionspb.RuleOf(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		full := optionspb.FullMethod(m)
		switch r.GetCallers() {
		case optionspb.Callers_CALLERS_CLIENTS:
			out = append(out, rule{prefix: full, roles: []Role{RoleMaster, RoleClient}})
		case optionspb.Callers_CALLERS_MASTERS:
			out = append(out, rule{prefix: full, roles: []Role{RoleMaster}})
		case optionspb.Callers_CALLERS_REGION_SERVERS:
			out = append(out, rule{prefix: full, roles: []Role{RoleRegionServer}, self: true})
		default:
			errs = append(errs, fmt.Errorf("%s: callers %s: the identity policy knows no such callers", full, r.GetCallers()))
		}
	}
	return out, errors.Join(errs...)
}

// admitRules adds rs to p, each with roles of its own, so that no two
// policies share a slice.
func (p *Policy) admitRules(rs []rule) *Policy {
	for _, r := range rs {
		r.roles = slices.Clone(r.roles)
		p.rules = append(p.rules, r)
	}
	return p
}

// MasterPolicy is who may call a master's gRPC server: the admin API
// clients and masters (access control decides, above, what each client
// may do); each method of the Master service whom its rule names (region
// servers, each only as itself).
//
// The Master service's own entry covers only methods this build does not
// have, a newer region server's: it lets such a call through to be
// answered Unimplemented, which a caller reads as "an older master", not
// PermissionDenied.
func MasterPolicy() *Policy {
	return (&Policy{}).
		Admit(AdminService, RoleClient, RoleMaster).
		AdmitSelf(MasterService, RoleRegionServer).
		admitRules(masterRules).
		Admit(HealthService, RoleClient, RoleMaster, RoleRegionServer).
		Admit(ReflectionService, RoleClient, RoleMaster)
}

// RegionServerPolicy is who may call a region server's gRPC server: each
// method of the RegionServer service whom its rule names (masters; also
// clients for ListRegions, `baton rs regions --direct`, to compare a
// server's view with the masters', which the region server then lets only
// clients holding read do), and masters its health.
//
// The RegionServer service's own entry covers only methods this build
// does not have, a newer master's: such a call is answered Unimplemented,
// as under MasterPolicy.
func RegionServerPolicy() *Policy {
	return (&Policy{}).
		Admit(RegionServerService, RoleMaster).
		admitRules(regionServerRules).
		Admit(HealthService, RoleMaster)
}
