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
	rg, ok, err := getRegion(r, region)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, procedure.Errorf(ErrNotFound, "region %q does not exist", region)
	}
	if toServer != "" {
		if _, ok, err := getServer(r, toServer); err != nil || !ok {
			if err == nil {
				err = procedure.Errorf(ErrNotFound, "region server %q is not known to the cluster", toServer)
			}
			return nil, err
		}
	}
	ns, table := SplitTableName(rg.Table)
	return &TransitRegionState{Region: region, Namespace: ns, Table: table, Kind: KindMove, Target: toServer}, nil
}
