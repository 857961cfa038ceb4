package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
// are written a key each, with their args, as 0.1.0 writes them; once
// the last member is upgraded and the cluster version raised, they are
// written in groups, keeping their requests instead; the trail lists
// both kinds alike, each record once, with the args and digest of its
// own request and never the request.
func TestAuditGroupsWaitForTheLastUpgrade(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{NoDomain: true, SteadyLeader: true, Audit: true, Node: func(i int, c *cluster.Config) {
		if i == 2 {
			c.Build = old
		}
	}})
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := map[string]*adminpb.SubmitProcedureRequest{} // by nonce
	submit := func(round string) {
		var wg sync.WaitGroup
		for i := range 8 {
			req := &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "t", Nonce: fmt.Sprint(round, i)}
			sent[req.Nonce] = req
			wg.Go(func() {
				_, err := c.Leader().Admin().SubmitProcedure(ctx, req)
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
					if len(r.GetRequest()) == 0 || r.GetArgs() != "" || r.GetArgsDigest() != "" {
						t.Errorf("a record in a group holds request %x, args %q, digest %q: want the request alone", r.GetRequest(), r.GetArgs(), r.GetArgsDigest())
					}
				} else {
					alone++
					if len(r.GetRequest()) != 0 || r.GetArgs() == "" || r.GetArgsDigest() == "" {
						t.Errorf("a record alone holds request %x, args %q, digest %q: want args and digest, as 0.1.0 writes them", r.GetRequest(), r.GetArgs(), r.GetArgsDigest())
					}
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
			var args struct{ Nonce string }
			if err := json.Unmarshal([]byte(r.GetArgs()), &args); err != nil || sent[args.Nonce] == nil {
				t.Fatalf("record %s lists args %q (%v), of no request sent", r.GetId(), r.GetArgs(), err)
			}
			wire, err := (proto.MarshalOptions{Deterministic: true}).Marshal(sent[args.Nonce])
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(wire); r.GetArgsDigest() != hex.EncodeToString(sum[:]) || r.GetRequest() != nil {
				t.Fatalf("record %s lists digest %q and request %x; want the digest of its request's bytes and no request", r.GetId(), r.GetArgsDigest(), r.GetRequest())
			}
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
