package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Every list answer is bounded in bytes as well as in items: these plant
// records (as release 0.1.0 stored them, or merely very many of the
// longest the API takes) that made each list's answer larger than gRPC's
// 4 MiB, and page through them all.

const pageBytesMost = 2 << 20 // well under gRPC's 4 MiB

func boundsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pageAll calls list with each next_page_token until there is none,
// checking that every answer stays under pageBytesMost, and returns the
// number of pages.
func pageAll[R interface {
	proto.Message
	GetNextPageToken() string
}](t *testing.T, what string, list func(tok string) (R, error)) int {
	t.Helper()
	tok, pages := "", 0
	for {
		r, err := list(tok)
		if err != nil {
			t.Fatalf("%s: page %d: %v", what, pages+1, err)
		}
		pages++
		if n := proto.Size(r); n > pageBytesMost {
			t.Errorf("%s: page %d is %d bytes", what, pages, n)
		}
		if tok = r.GetNextPageToken(); tok == "" {
			return pages
		}
	}
}

// TestListServersOfOldHugeAddresses: region servers registered by 0.1.0
// with addresses of 1 MiB are listed with their addresses cut and marked,
// in pages under the limit.
func TestListServersOfOldHugeAddresses(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const n = 5
	for i := range n {
		b, err := json.Marshal(domain.Server{Address: strings.Repeat("a", 1<<20), StartCode: 1, State: "live"})
		if err != nil {
			t.Fatal(err)
		}
		fc.SeedRecord(domain.ServerKey(fmt.Sprintf("old%d", i)), b)
	}
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	var servers []*adminpb.Server
	pageAll(t, "list servers", func(tok string) (*adminpb.ListServersResponse, error) {
		r, err := a.ListServers(ctx, &adminpb.ListServersRequest{PageToken: tok})
		servers = append(servers, r.GetServers()...)
		return r, err
	})
	if len(servers) != n {
		t.Fatalf("%d servers listed, want %d", len(servers), n)
	}
	for _, s := range servers {
		if !s.GetTruncated() || len(s.GetAddress()) > 1024 || !strings.HasSuffix(s.GetAddress(), "…[cut from 1048576 bytes]") {
			t.Errorf("server %s: truncated %v, address of %d bytes", s.GetId(), s.GetTruncated(), len(s.GetAddress()))
		}
	}
}

// TestListNamespacesPaged: 40,000 namespaces of 128 bytes were one answer
// of 5 MB. Now a caller that pages (the Go client, so 'baton namespace
// list') gets them all in pages; one that sends no token (a 0.1.0 client)
// gets the first page and a next_page_token saying there is more.
func TestListNamespacesPaged(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const n = 40_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns%06d%s", i, strings.Repeat("x", 120))
	}
	fc.SeedNamespaces(names)
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	first, err := a.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
	if err != nil {
		t.Fatalf("first page: %v", err)
	}
	if first.GetNextPageToken() == "" || len(first.GetNamespaces()) >= n {
		t.Errorf("first page: %d names, next_page_token %q", len(first.GetNamespaces()), first.GetNextPageToken())
	}
	var listed []string
	pages := pageAll(t, "list namespaces", func(tok string) (*adminpb.ListNamespacesResponse, error) {
		r, err := a.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{PageToken: tok, PageSize: 10_000})
		listed = append(listed, r.GetNamespaces()...)
		return r, err
	})
	all, err := fc.Client().ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][]string{"paging": listed, "client": all} {
		if len(got) != n+1 { // and default
			t.Errorf("%s: %d namespaces, want %d", what, len(got), n+1)
			continue
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("%s: %q after %q", what, got[i], got[i-1])
			}
		}
	}
	t.Logf("%d pages of page_size 10,000", pages)
}

// longTable is a table whose namespace and name are 128 bytes, the most.
var longTable = strings.Repeat("n", 128) + ":" + strings.Repeat("t", 128)

// TestListRegionsBoundedInBytes: 7,000 regions of a table with the
// longest names were 5 MB at page_size 10,000.
func TestListRegionsBoundedInBytes(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const n = 7000
	server := strings.Repeat("s", 128)
	fc.SeedTable(longTable, domain.TableEnabled, n, 3, func(int) domain.Region {
		return domain.Region{State: domain.RegionOpen, Server: server}
	})
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	seen := 0
	pages := pageAll(t, "list regions", func(tok string) (*adminpb.ListRegionsResponse, error) {
		r, err := a.ListRegions(ctx, &adminpb.ListRegionsRequest{PageToken: tok, PageSize: 10_000})
		seen += len(r.GetRegions())
		return r, err
	})
	if seen != n || pages < 2 {
		t.Errorf("%d regions in %d pages, want %d in more than one", seen, pages, n)
	}
}

// TestListTablesBoundedInBytes: tables whose regions are spread over
// many servers carry one region group per server; 20 of them were 5 MB.
func TestListTablesBoundedInBytes(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const tables, regions = 20, 2000
	for i := range tables {
		fc.SeedTable(fmt.Sprintf("default:t%02d", i), domain.TableEnabled, regions, 3, func(r int) domain.Region {
			return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("%05d%s", r, strings.Repeat("s", 120))}
		})
	}
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	seen := 0
	pageAll(t, "list tables", func(tok string) (*adminpb.ListTablesResponse, error) {
		r, err := a.ListTables(ctx, &adminpb.ListTablesRequest{PageToken: tok, PageSize: 1000})
		seen += len(r.GetTables())
		return r, err
	})
	if seen != tables {
		t.Errorf("%d tables listed, want %d", seen, tables)
	}
}

// TestListLocksPagedAndBounded: an external lock on 10,000 regions, its
// description 4 KiB (what the API takes), was a lock table of 15 MB.
// Pages end by count and size; a caller sending no token gets the first
// page and a token; the Go client reads them all.
func TestListLocksPagedAndBounded(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const n = 10_000
	names := fc.SeedTable("default:locked", domain.TableEnabled, n, 3, func(int) domain.Region {
		return domain.Region{State: domain.RegionClosed}
	})
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	_, err := a.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "region", Names: names, Holder: strings.Repeat("h", 256),
		Description: strings.Repeat("d", 4096), Nonce: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	fc.WaitFor("the lock held", func() bool {
		r, err := a.ListLocks(ctx, &adminpb.ListLocksRequest{PageSize: 1})
		return err == nil && len(r.GetLocks()) == 1 && len(r.GetLocks()[0].GetHolders()) == 1
	})
	first, err := a.ListLocks(ctx, &adminpb.ListLocksRequest{})
	if err != nil {
		t.Fatalf("first page: %v", err)
	}
	if first.GetNextPageToken() == "" {
		t.Errorf("first page of %d locks says nothing of more", len(first.GetLocks()))
	}
	seen := 0
	pageAll(t, "list locks", func(tok string) (*adminpb.ListLocksResponse, error) {
		r, err := a.ListLocks(ctx, &adminpb.ListLocksRequest{PageToken: tok, PageSize: 10_000})
		seen += len(r.GetLocks())
		return r, err
	})
	all, err := fc.Client().ListLocks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if seen < n || len(all.GetLocks()) != seen {
		t.Errorf("paging listed %d locks, the client %d, want %d at least", seen, len(all.GetLocks()), n)
	}
}

// TestCancelProceduresAnswerBounded: cancelling 2,500 procedures stored
// with 4 KiB owners and nonces (as 0.1.0 took them) answered 6 MB. Now
// the answer lists what fits in 1 MiB, counts them all, and names every
// id for a confirmation to bind.
func TestCancelProceduresAnswerBounded(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	_, x := fc.WaitLeader()
	const n = 2500
	for i := range n {
		p, err := diag.New(diag.TypeSleep, map[string]string{"steps": "1", "delay": "1h"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.Submit(p, procedure.SubmitOptions{Owner: strings.Repeat("o", 4096), Nonce: fmt.Sprintf("%05d%s", i, strings.Repeat("n", 4091))}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := boundsCtx(t)
	r, err := fc.Leader().Admin().CancelProcedures(ctx, &adminpb.CancelProceduresRequest{Type: diag.TypeSleep, DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if s := proto.Size(r); s > pageBytesMost {
		t.Errorf("answer of %d bytes", s)
	}
	if !r.GetTruncated() || r.GetCancelledCount() != n || len(r.GetCancelledIds()) != n || len(r.GetCancelled()) >= n {
		t.Errorf("truncated %v, cancelled_count %d, %d ids, %d listed", r.GetTruncated(), r.GetCancelledCount(), len(r.GetCancelledIds()), len(r.GetCancelled()))
	}
}

// bloated is a procedure whose persisted data is as large as its Pad: a
// 0.1.0 procedure whose arguments were megabytes.
type bloated struct {
	procedure.Base
	Pad string
}

func (p *bloated) Execute(*procedure.Context) (procedure.Step, error) { return procedure.Done(), nil }
func (p *bloated) Rollback(*procedure.Context) error                  { return nil }

// TestGetProcedureCutsOldHugeData: a procedure stored with 5 MiB of data
// could not be read at all; GetProcedure now carries its first 64 KiB and
// says it is cut.
func TestGetProcedureCutsOldHugeData(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, Register: func(r *procedure.Registry) error {
		return r.Register("bloated", 1, func() procedure.Procedure { return &bloated{} })
	}})
	fc.WaitLeader()
	id := fc.Submit(&bloated{Pad: strings.Repeat("p", 5<<20)}, "")
	fc.Wait(id, 30*time.Second)
	p, err := fc.Leader().Admin().GetProcedure(boundsCtx(t), &adminpb.GetProcedureRequest{Id: id})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !p.GetTruncated() || len(p.GetData()) > 64<<10 {
		t.Errorf("truncated %v, %d bytes of data", p.GetTruncated(), len(p.GetData()))
	}
}

// parked suspends until woken, which nothing does: stuck once it has not
// been written for stuck_after.
type parked struct{ procedure.Base }

func (p *parked) Execute(*procedure.Context) (procedure.Step, error) { return procedure.Suspend(), nil }
func (p *parked) Rollback(*procedure.Context) error                  { return nil }

// TestProcedureStatsBounded: a thousand stuck procedures stored with
// owners and nonces of 4 KiB (as 0.1.0 took them) were named in 2 MB at
// max_stuck 1,000; the stuck list now ends at 1 MiB and still counts them
// all. A stuck_after_ms that overflows a duration is refused.
func TestProcedureStatsBounded(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, Register: func(r *procedure.Registry) error {
		return r.Register("parked", 1, func() procedure.Procedure { return &parked{} })
	}})
	_, x := fc.WaitLeader()
	const n = 1000
	for i := range n {
		if _, err := x.Submit(&parked{}, procedure.SubmitOptions{Owner: strings.Repeat("o", 4096), Nonce: fmt.Sprintf("%05d%s", i, strings.Repeat("n", 4091))}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	var r *adminpb.ProcedureStatsResponse
	fc.WaitForNil("every procedure stuck", func() error {
		var err error
		r, err = a.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: 1, MaxStuck: 1000})
		if err == nil && r.GetStuckCount() != n {
			err = fmt.Errorf("%d stuck", r.GetStuckCount())
		}
		return err
	})
	if s := proto.Size(r); s > (1<<20)+(64<<10) || len(r.GetStuck()) == 0 {
		t.Errorf("%d stuck named in %d bytes", len(r.GetStuck()), s)
	}
	_, err := a.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: math.MaxInt64})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "stuck_after_ms") {
		t.Errorf("stuck_after_ms of 292 million years: %v", err)
	}
}

// TestAclListPaged: 12,000 tokens with names of 128 bytes, made by a
// principal of 256 (what the API takes), were one answer of 5 MB. Now a
// page ends by count and size; a caller that sends no token (0.1.0's)
// gets the first page and a token saying there are more; the Go client,
// so 'acl list', reads every page.
func TestAclListPaged(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	const bindings, tokens, revoked = 3000, 12_000, 2000
	recs := map[string][]byte{}
	for i := range revoked {
		recs[fmt.Sprintf("acl/revoked/r%05d%s", i, strings.Repeat("r", 120))] = []byte(`{"at_ms":1,"by":"` + strings.Repeat("b", 256) + `"}`)
	}
	for i := range bindings {
		recs[fmt.Sprintf("acl/cert/c%05d%s", i, strings.Repeat("c", 120))] = []byte(`{"permission":"read","created_ms":1,"created_by":"` + strings.Repeat("b", 256) + `"}`)
	}
	for i := range tokens {
		recs[fmt.Sprintf("acl/token/a%023d", i)] = []byte(`{"permission":"read","name":"` + strings.Repeat("n", 128) +
			`","hash":"` + strings.Repeat("0", 64) + `","created_ms":1,"created_by":"` + strings.Repeat("b", 256) + `"}`)
	}
	fc.SeedRecords(recs)
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	first, err := a.AclList(ctx, &adminpb.AclListRequest{})
	if err != nil || first.GetNextPageToken() == "" || len(first.GetBindings()) == 0 {
		t.Fatalf("first page: %d bindings, %d tokens, next_page_token %q, %v", len(first.GetBindings()), len(first.GetTokens()), first.GetNextPageToken(), err)
	}
	var nb, nt, nr int
	pageAll(t, "acl list", func(tok string) (*adminpb.AclListResponse, error) {
		r, err := a.AclList(ctx, &adminpb.AclListRequest{PageToken: tok, PageSize: 10_000})
		nb, nt, nr = nb+len(r.GetBindings()), nt+len(r.GetTokens()), nr+len(r.GetRevoked())
		return r, err
	})
	all, err := fc.Client().AclList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nb != bindings || nt != tokens || len(all.GetBindings()) != bindings || len(all.GetTokens()) != tokens {
		t.Errorf("paging: %d bindings, %d tokens; the client %d, %d; want %d, %d", nb, nt, len(all.GetBindings()), len(all.GetTokens()), bindings, tokens)
	}
	// Revocations come last, after the tokens, whose keys sort after
	// theirs: a page resumed after a token must still list them all.
	if nr != revoked || len(all.GetRevoked()) != revoked {
		t.Errorf("paging: %d revocations, the client %d; want %d", nr, len(all.GetRevoked()), revoked)
	}
	if _, err := a.AclList(ctx, &adminpb.AclListRequest{PageToken: "nonsense"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad token: %v", err)
	}
}

// TestTrailsOfOldHugeRecords: an audit record or a repair record stored
// with fields of 5 MiB (written before the fields were cut, or forged
// into the state) made every page holding it fail; answers now cut each
// field.
func TestTrailsOfOldHugeRecords(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	huge := strings.Repeat("x", 5<<20)
	for i := range 3 {
		b, err := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("1-%d", i), Method: "CreateTable", Principal: "client/ops",
			Args: huge, Message: huge, Code: "OK", CommittedUnixMs: time.Now().UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		fc.SeedRecord(fmt.Sprintf("audit/%020d-%010d", 1, i), b)
	}
	rb, err := json.Marshal(domain.RepairRecord{Seq: 1, At: time.Now(), Action: "maintenance on", Args: map[string]string{"reason": huge},
		Caller: huge, Node: "m1", Outcome: "done", Result: huge})
	if err != nil {
		t.Fatal(err)
	}
	fc.SeedRecord(domain.RepairKey(1), rb)
	ctx := boundsCtx(t)
	a := fc.Leader().Admin()
	var audits []*adminpb.AuditRecord
	pageAll(t, "list audit", func(tok string) (*adminpb.ListAuditResponse, error) {
		r, err := a.ListAudit(ctx, &adminpb.ListAuditRequest{PageToken: tok})
		audits = append(audits, r.GetRecords()...)
		return r, err
	})
	planted := 0
	for _, r := range audits {
		if strings.HasPrefix(r.GetArgs(), "xxx") {
			planted++
			if len(r.GetArgs()) > 1024 || len(r.GetMessage()) > 1024 {
				t.Errorf("audit record %s: args of %d bytes, message of %d", r.GetId(), len(r.GetArgs()), len(r.GetMessage()))
			}
		}
	}
	if planted != 3 {
		t.Errorf("%d planted audit records listed, want 3", planted)
	}
	var repairs []*adminpb.RepairRecord
	pageAll(t, "list repairs", func(tok string) (*adminpb.ListRepairsResponse, error) {
		r, err := a.ListRepairs(ctx, &adminpb.ListRepairsRequest{PageToken: tok})
		repairs = append(repairs, r.GetRecords()...)
		return r, err
	})
	if len(repairs) != 1 || proto.Size(repairs[0]) > 64<<10 {
		t.Errorf("%d repair records, the first of %d bytes", len(repairs), proto.Size(repairs[0]))
	}
}
