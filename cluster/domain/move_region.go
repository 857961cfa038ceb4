package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// MoveRegion moves an open region to another server: a MOVE
// TransitRegionState (region_transition.go), built here from the admin
// request.
func init() {
	registerBuilder(adminpb.Admin_MoveRegion_FullMethodName, func(d *Domain, req *adminpb.MoveRegionRequest) (procedure.Procedure, error) {
		return d.MoveRegionProcedure(req.GetRegion(), req.GetToServer())
	})
}

// MoveRegionProcedure builds a MOVE TransitRegionState of region to
// toServer ("" for the least loaded other live server).
func (d *Domain) MoveRegionProcedure(region, toServer string) (procedure.Procedure, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	rg, err := knownRegion(r, region)
	if err != nil {
		return nil, err
	}
	if toServer != "" {
		if _, err := knownServer(r, toServer); err != nil {
			return nil, err
		}
	}
	ns, table := SplitTableName(rg.Table)
	return &TransitRegionState{Region: region, Namespace: ns, Table: table, Kind: KindMove, Target: toServer}, nil
}
