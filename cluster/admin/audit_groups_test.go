package admin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// storedSubmissions reads node i's audit keys: the records of
// SubmitProcedure by principal, and how many of them sit in groups and
// alone. It fails t on a group holding two holders' records or records
// numbered other than its key says.
func storedSubmissions(t *testing.T, sc *secureCluster, i int) (byPrincipal map[string]int, grouped, alone int) {
	t.Helper()
	byPrincipal = map[string]int{}
	sc.nodes[i].node.FSM().Scan(access.AuditPrefix, func(k string, v []byte) bool {
		suffix := strings.TrimPrefix(k, access.AuditPrefix)
		recs := access.StoredRecords(suffix, v)
		isGroup := strings.Contains(suffix, "+")
		holders := map[string]bool{}
		for _, sr := range recs {
			var r adminpb.AuditRecord
			if err := proto.Unmarshal(sr.Value, &r); err != nil {
				t.Errorf("%s: %v", k, err)
				continue
			}
			if want, _ := access.AuditKeyOf(r.GetId()); want != access.AuditPrefix+sr.Suffix {
				t.Errorf("%s holds record %s at %s", k, r.GetId(), sr.Suffix)
			}
			holders[r.GetPrincipal()] = true
			if r.GetMethod() != "SubmitProcedure" {
				continue
			}
			byPrincipal[r.GetPrincipal()]++
			if isGroup {
				grouped++
			} else {
				alone++
			}
		}
		if isGroup && len(holders) != 1 {
			t.Errorf("group %s holds the records of %v", k, holders)
		}
		return true
	})
	return byPrincipal, grouped, alone
}

// TestCarriedRecordsGroupedByHolder: concurrent submissions of two
// principals have their records written in groups, one holder each,
// numbered as their keys say; every one is listed once, oldest first and
// newest first; and past its quota the flooder loses its own oldest
// groups, never a record of the other's, on every master.
func TestCarriedRecordsGroupedByHolder(t *testing.T) {
	const quota = 60
	sc := startSecureCluster(t, 3, Access{AuditMaxPerPrincipal: quota, InitialGrants: map[string]security.Permission{
		"root": security.PermAdmin, "op": security.PermOperate}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, op := sc.as(li, "root", ""), sc.as(li, "op", "")
	waitBound(t, ctx, root, "admin")
	waitBound(t, ctx, op, "operate")
	submit := func(c adminpb.AdminClient, who string, callers, each int) {
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := range each {
					_, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: who, Nonce: fmt.Sprintf("%s-%d-%d", who, g, i)})
					if err != nil {
						t.Errorf("%s submits: %v", who, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	wg.Go(func() { submit(op, "op", 24, 10) })   // 240, four times op's quota
	wg.Go(func() { submit(root, "root", 8, 5) }) // 40, within root's
	wg.Wait()
	if t.Failed() {
		return
	}

	recs := auditOf(t, ctx, root)
	seen := map[string]bool{}
	count := map[string]int{}
	for i, r := range recs {
		if seen[r.GetId()] {
			t.Fatalf("record %s listed twice", r.GetId())
		}
		seen[r.GetId()] = true
		if i > 0 {
			prev, _ := access.AuditKeyOf(recs[i-1].GetId())
			this, _ := access.AuditKeyOf(r.GetId())
			if prev >= this {
				t.Fatalf("listed out of order: %s then %s", recs[i-1].GetId(), r.GetId())
			}
		}
		if r.GetMethod() == "SubmitProcedure" {
			count[r.GetPrincipal()]++
		}
	}
	if count["client/root"] != 40 {
		t.Fatalf("root keeps %d of its 40 submissions' records; want all (by principal: %v)", count["client/root"], count)
	}
	// Groups are cut at an eighth of the quota: the flooder keeps at
	// least seven eighths of it.
	if n := count["client/op"]; n < quota-quota/8 || n > quota {
		t.Fatalf("the flooder keeps %d records; want %d-%d", n, quota-quota/8, quota)
	}
	desc := listAudit(t, ctx, root, &adminpb.ListAuditRequest{NewestFirst: true, PageSize: 7})
	if len(desc) != len(recs) {
		t.Fatalf("newest first: %d records, oldest first %d", len(desc), len(recs))
	}
	for i := range desc {
		if desc[i].GetId() != recs[len(recs)-1-i].GetId() {
			t.Fatalf("newest first, record %d is %s; oldest first it is %s", i, desc[i].GetId(), recs[len(recs)-1-i].GetId())
		}
	}
	// Every master holds them so, in groups (each a holder's), once
	// its state has the leader's last prune.
	for i := range sc.nodes {
		var by map[string]int
		var grouped, alone int
		testwait.For(t, 10*time.Second, fmt.Sprintf("master %d holding what the leader lists", i), func() bool {
			by, grouped, alone = storedSubmissions(t, sc, i)
			return by["client/root"] == count["client/root"] && by["client/op"] == count["client/op"]
		})
		if alone != 0 || grouped != count["client/root"]+count["client/op"] {
			t.Fatalf("master %d: %d submissions' records in groups, %d alone; want all %d in groups", i, grouped, alone, count["client/root"]+count["client/op"])
		}
	}
}

// TestAuditFileExportsEveryGroupedRecord: each master's audit file holds
// every record of concurrent submissions once, written in groups,
// numbered without a gap: as applied, past a per-principal quota that
// prunes whole groups; and reread from the trail, into and out of
// groups, when the exporter's queue overflows.
func TestAuditFileExportsEveryGroupedRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quota    int
		maxHeld  int
		overflow bool
	}{
		{"past the quota", 50, 0, false},
		// 400 bytes hold any one record of this test but only a few
		// (a submission's is about 130 bytes as read from its group,
		// keeping its request), and the entries of 16 callers'
		// submissions carried groups big enough to overflow it in
		// every run measured (12 since records shrank), as they are
		// applied, whatever the writer's pace (3,000 waited for a
		// group of 14 or a writer behind, and some runs had neither).
		// A queue that full exports a PENDING record (the AclGrant's)
		// at once, its outcome then a line of its own.
		{"queue overflowing", 0, 400, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sc, li, ctx, root := startRootCluster(t, Access{AuditFile: &AuditExport{Path: dir}, AuditMaxPerPrincipal: tc.quota})
			if tc.maxHeld > 0 {
				for _, n := range sc.nodes {
					n.srv.exporter.SetMaxHeld(tc.maxHeld)
				}
			}
			const callers, each = 16, 8
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						if _, err := root.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "t", Nonce: fmt.Sprintf("%d-%d", g, i)}); err != nil {
							t.Errorf("submission: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "omega", Permission: "read"}); err != nil {
				t.Fatal(err)
			}
			_, grouped, _ := storedSubmissions(t, sc, li)
			if grouped == 0 {
				t.Fatal("no submission's record in a group: the test tests nothing")
			}
			for _, n := range sc.nodes {
				id := n.srv.b.ID()
				path := filepath.Join(dir, id+".jsonl")
				waitExported(t, id, path, `\"omega\"`)
				submitted := 0
				for _, l := range exportedOnceEach(t, id, path) {
					if l.Method == "SubmitProcedure" {
						submitted++
					}
				}
				if submitted != callers*each {
					t.Errorf("%s: %d submissions' records in the file, want %d", id, submitted, callers*each)
				}
				if got := testutil.ToFloat64(n.srv.exporter.Overflows()); tc.overflow && got == 0 {
					t.Errorf("%s: the queue never overflowed; the case tests nothing", id)
				}
			}
		})
	}
}
