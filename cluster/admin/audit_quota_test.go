package admin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestFloodsEvictOnlyTheFloodersRecords: a certificate holding nothing
// makes more than 10,000 refused calls and an operator hundreds of
// audited ones, past both spaces' ceilings; the admin's records and
// another client's refused escalation attempts all remain, and each
// flooder keeps at most its quota.
func TestFloodsEvictOnlyTheFloodersRecords(t *testing.T) {
	sc := startSecureCluster(t, 3, Access{AuditMaxRecords: 200, AuditMaxRefusedPerCaller: 15, InitialGrants: map[string]security.Permission{
		"root": security.PermAdmin, "op": security.PermOperate, "ro": security.PermRead}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root := sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
	for i := range 3 {
		if _, err := root.AclGrant(ctx, &adminpb.AclGrantRequest{Client: fmt.Sprintf("user%d", i), Permission: "read"}); err != nil {
			t.Fatal(err)
		}
	}
	ro := sc.as((li+1)%3, "ro", "")
	waitBound(t, ctx, ro, "read")
	for range 2 {
		_, err := ro.DeleteTable(ctx, &adminpb.TableRequest{Name: "payroll"})
		wantCode(t, "a read holder deletes", err, codes.PermissionDenied)
	}

	const refusals = 10_100
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 48 {
		nobody := sc.as(w%3, "nobody", "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= refusals {
				_, err := nobody.DeleteTable(ctx, &adminpb.TableRequest{Name: "t"})
				if c := status.Code(err); c != codes.PermissionDenied && c != codes.ResourceExhausted {
					t.Errorf("an unbound certificate deletes: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	op := sc.as(li, "op", "")
	waitBound(t, ctx, op, "operate")
	for range 250 {
		_, err := op.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: 999_999})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("pausing a procedure that does not exist: %v", err)
		}
	}

	recs := auditOf(t, ctx, root)
	count := map[string]int{}
	for _, r := range recs {
		count[r.GetPrincipal()+" "+r.GetMethod()]++
	}
	if count["client/root AclGrant"] != 3 || count["client/ro DeleteTable"] != 2 {
		t.Fatalf("after the floods: %d of the admin's 3 grants and %d of the read holder's 2 refused deletions remain; want all (records by principal and method: %v)",
			count["client/root AclGrant"], count["client/ro DeleteTable"], count)
	}
	if n := count["client/nobody DeleteTable"]; n == 0 || n > 15 {
		t.Fatalf("the nobody keeps %d refusals; want 1-15, its quota", n)
	}
	if n := count["client/op PauseProcedure"]; n == 0 || n > 200 {
		t.Fatalf("the operator keeps %d records; want 1-200", n)
	}
}
