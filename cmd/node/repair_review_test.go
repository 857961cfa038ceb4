package main

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
)

// Review: the --yes rule is that a command which can take work away from
// the cluster acts only when confirmed. 'region unassign REGION' on a
// healthy OPEN region takes it offline, and stays so (the cluster never
// does that by itself), yet it acts at once without --yes.
func TestReviewUnassignOfAServingRegionNeedsYes(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	cl := fc.Client()
	create, err := cl.CreateTable(ctxT(t), "", "t1", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	fc.MustSucceed(create, 30*time.Second)
	regions, err := cl.ListRegions(ctxT(t), "t1")
	if err != nil || len(regions) != 1 {
		t.Fatalf("regions %v, %v", regions, err)
	}
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ","), "USER": "ann"}
	tc := cliCase{name: "unassign unconfirmed", args: []string{"region", "unassign", regions[0].GetName()}, code: 2,
		stdout: "dry run: close region", stderr: "add --yes"}
	tc.check(t, env)
}
