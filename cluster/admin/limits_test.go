package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

func wantInvalid(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("%s: %v, want INVALID_ARGUMENT", what, err)
		return
	}
	for _, w := range words {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), w)
		}
	}
}

// TestRequestLimitsRefuseBeforeStoring: a field over its limit, an
// identifier holding a control character and a string that is not UTF-8
// are refused with INVALID_ARGUMENT naming the field, by the leader and
// by a standby (before it forwards), on the admin API, the Master service
// and a region server; and nothing was submitted.
func TestRequestLimitsRefuseBeforeStoring(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{})
	li, _ := fc.WaitLeader()
	rs := fc.StartRegionServer("rs1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sleep := map[string]string{"steps": "1", "delay": "1ms"}
	for _, m := range []*clustertest.Master{fc.Master(li), fc.Master((li + 1) % 3)} {
		a := m.Admin()
		_, err := a.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: sleep, Owner: strings.Repeat("o", 1<<20)})
		wantInvalid(t, m.ID+" 1 MiB owner", err, "owner", "1048576 bytes", "at most 256")
		_, err = a.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: sleep, Nonce: strings.Repeat("n", 300)})
		wantInvalid(t, m.ID+" long nonce", err, "nonce", "at most 256")
		_, err = a.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: sleep, Owner: "me\n\x1b[31mroot"})
		wantInvalid(t, m.ID+" owner with ESC", err, "owner", "control character")
		_, err = a.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: sleep, Owner: "alice\u202e\u2066nimda\u200b"})
		wantInvalid(t, m.ID+" owner with a right-to-left override", err, "owner", "invisible character", `\u202e`)
		_, err = a.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Holder: "h\u200b", Nonce: "y"})
		wantInvalid(t, m.ID+" holder with a zero-width space", err, "holder", "invisible character")
		args := map[string]string{"steps": "1", "delay": "1ms", "pad": strings.Repeat("p", 16<<10), "pad2": strings.Repeat("p", 16<<10),
			"pad3": strings.Repeat("p", 16<<10), "pad4": strings.Repeat("p", 16<<10)}
		_, err = a.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: args})
		wantInvalid(t, m.ID+" arguments of 64 KiB", err, "arguments", "at most 65536")
		_, err = a.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Holder: "h\x1b", Nonce: "x"})
		wantInvalid(t, m.ID+" holder with ESC", err, "holder", "control character")
		_, err = a.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Holder: "h", Description: strings.Repeat("d", 3<<20)})
		wantInvalid(t, m.ID+" 3 MiB description", err, "description", "at most 4096")
		// A Go client cannot marshal a string that is not UTF-8: send
		// SubmitProcedureRequest.type (field 1) as bytes.
		err = m.Conn().Invoke(ctx, "/baton.admin.v1.Admin/SubmitProcedure", wrapperspb.Bytes([]byte("sle\xffep")), &emptypb.Empty{})
		wantInvalid(t, m.ID+" type not UTF-8", err, "type", "not valid UTF-8")
		_, err = rspb.NewMasterClient(m.Conn()).Heartbeat(ctx, &rspb.HeartbeatRequest{ServerId: strings.Repeat("s", 300)})
		wantInvalid(t, m.ID+" Master service: long server_id", err, "server_id", "at most 256")
	}
	cc, err := grpc.NewClient(rs.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = rspb.NewRegionServerClient(cc).ExecuteBatch(ctx, &rspb.BatchRequest{Ops: []*rspb.RegionOp{{Region: strings.Repeat("r", 600)}}})
	wantInvalid(t, "region server: long region", err, "ops[0].region", "at most 512")

	list, err := fc.Master(li).Admin().ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetProcedures()); n != 0 {
		t.Errorf("%d procedures submitted by refused calls", n)
	}
}

// TestListOfOldOversizeRecords: procedures stored with a 1 MiB owner (as
// release 0.1.0 took them) no longer make ListProcedures fail, on the
// leader or on a standby reading stale: pages end by size, the owner is
// cut and the procedure says so, and paging still lists every one.
func TestListOfOldOversizeRecords(t *testing.T) {
	// It reads from the leader and then from a standby it names.
	fc := clustertest.New(t, clustertest.Config{SteadyLeader: true})
	li, x := fc.WaitLeader()
	const n = 5
	var ids []uint64
	for i := range n {
		// Straight to the executor, past the API's limits, as 0.1.0 let
		// it. A leadership change on a loaded machine stops the executor
		// in hand: the nonce makes the retry on the next one the same
		// submission, whatever became of the first.
		var id uint64
		testwait.ForNil(t, 30*time.Second, "a submission past the limits", func() error {
			p, err := diag.New(diag.TypeSleep, map[string]string{"steps": "1", "delay": "1ms"})
			if err != nil {
				t.Fatal(err)
			}
			id, err = x.Submit(p, procedure.SubmitOptions{Owner: strings.Repeat("o", 1<<20), Nonce: fmt.Sprintf("old-%d", i)})
			if err != nil {
				li, x = fc.WaitLeader()
			}
			return err
		})
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listAll := func(a adminpb.AdminClient, consistency adminpb.Consistency) ([]*adminpb.Procedure, error) {
		var all []*adminpb.Procedure
		tok := ""
		for {
			page, err := a.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageToken: tok, Consistency: consistency})
			if err != nil {
				return nil, err
			}
			if s := proto.Size(page); s > 2<<20 {
				t.Errorf("a page of %d bytes", s)
			}
			all = append(all, page.GetProcedures()...)
			if tok = page.GetNextPageToken(); tok == "" {
				return all, nil
			}
		}
	}
	check := func(what string, all []*adminpb.Procedure) {
		t.Helper()
		if len(all) != n {
			t.Fatalf("%s: %d procedures listed, want %d", what, len(all), n)
		}
		for i, p := range all {
			if p.GetId() != ids[i] || !p.GetTruncated() || len(p.GetOwner()) > 1024 || !strings.HasSuffix(p.GetOwner(), "…[cut from 1048576 bytes]") {
				t.Errorf("%s: procedure %d: id %d, truncated %v, owner of %d bytes ending %q", what, i, p.GetId(), p.GetTruncated(), len(p.GetOwner()), p.GetOwner()[max(0, len(p.GetOwner())-30):])
			}
		}
	}
	all, err := listAll(fc.Master(li).Admin(), adminpb.Consistency_LINEARIZABLE)
	if err != nil {
		t.Fatalf("leader: %v", err)
	}
	check("leader", all)
	standby := fc.Master((li + 1) % 3).Admin()
	testwait.ForNil(t, 30*time.Second, "a standby listing every procedure", func() error {
		all, err = listAll(standby, adminpb.Consistency_STALE)
		if err == nil && len(all) < n {
			return status.Errorf(codes.Unavailable, "%d of %d", len(all), n)
		}
		return err
	})
	check("standby, stale", all)
	got, err := fc.Master(li).Admin().GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: ids[0]})
	if err != nil || !got.GetTruncated() {
		t.Errorf("get: truncated %v, %v", got.GetTruncated(), err)
	}
}
