package security

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

// MasterPolicy is who may call a master's gRPC server: the admin API
// clients and masters; the Master service region servers, each only as
// itself.
func MasterPolicy() *Policy {
	return (&Policy{}).
		Admit(AdminService, RoleClient, RoleMaster).
		AdmitSelf(MasterService, RoleRegionServer).
		Admit(HealthService, RoleClient, RoleMaster, RoleRegionServer).
		Admit(ReflectionService, RoleClient, RoleMaster)
}

// RegionServerPolicy is who may call a region server's gRPC server:
// masters; clients only to list its regions (`baton rs regions --direct`,
// to compare a server's view with the masters'), which the region server
// then lets only clients holding read do.
func RegionServerPolicy() *Policy {
	return (&Policy{}).
		Admit(RegionServerService, RoleMaster).
		Admit(RegionServerService+"ListRegions", RoleMaster, RoleClient).
		Admit(HealthService, RoleMaster)
}
