package admin_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestAuditGroupsWaitForTheLastUpgrade: while a member still runs a
// release that reads no group (format 1), the records submissions carry
// are written a key each, as 0.1.0 writes them; once the last member is
// upgraded and the cluster version raised, they are written in groups;
// the trail lists both kinds alike, each record once.
func TestAuditGroupsWaitForTheLastUpgrade(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{NoDomain: true, SteadyLeader: true, Audit: true, Node: func(i int, c *cluster.Config) {
		if i == 2 {
			c.Build = old
		}
	}})
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	submit := func(round string) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				_, err := c.Leader().Admin().SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "t", Nonce: fmt.Sprint(round, i)})
				if err != nil {
					t.Errorf("submission %s%d: %v", round, i, err)
				}
			})
		}
		wg.Wait()
	}
	// kinds counts, in the leader's state, the submissions' records
	// written alone and in groups.
	kinds := func() (alone, grouped int) {
		c.Leader().Node().FSM().Scan(access.AuditPrefix, func(k string, v []byte) bool {
			suffix := strings.TrimPrefix(k, access.AuditPrefix)
			for _, sr := range access.StoredRecords(suffix, v) {
				var r adminpb.AuditRecord
				if proto.Unmarshal(sr.Value, &r) != nil || r.GetMethod() != "SubmitProcedure" {
					continue
				}
				if strings.Contains(suffix, "+") {
					grouped++
				} else {
					alone++
				}
			}
			return true
		})
		return alone, grouped
	}
	submit("old")
	if alone, grouped := kinds(); alone != 8 || grouped != 0 {
		t.Fatalf("at cluster version 1: %d records alone and %d in groups; want 8 alone", alone, grouped)
	}
	c.RestartAs(2, version.Build{})
	waitClusterFormat(t, c, version.MaxFormat)
	submit("new")
	if alone, grouped := kinds(); alone != 8 || grouped != 8 {
		t.Fatalf("at cluster version 2: %d records alone and %d in groups; want 8 and 8", alone, grouped)
	}
	var ids []string
	tok := ""
	for {
		resp, err := c.Leader().Admin().ListAudit(ctx, &adminpb.ListAuditRequest{Method: "SubmitProcedure", PageSize: 3, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			ids = append(ids, r.GetId())
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("record %s listed twice: %v", id, ids)
		}
		seen[id] = true
	}
	if len(ids) != 16 {
		t.Fatalf("listed %d submissions' records, want 16: %v", len(ids), ids)
	}
}
