package client_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// TestMasterRefusesAMillionRegions: a create of 1,000,000 regions in one
// call, sent past the client's own check, is refused by the master at
// once (built on the master the call reached, before any write), with
// INVALID_ARGUMENT and the limit named.
func TestMasterRefusesAMillionRegions(t *testing.T) {
	fc := start(t, 1)
	cc, err := grpc.NewClient(fc.AdminAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = adminpb.NewAdminClient(cc).CreateTable(ctx(t), &adminpb.CreateTableRequest{Name: "huge", Regions: 1_000_000})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1000000 regions (want 1..100000)") {
		t.Fatalf("create of 1,000,000 regions: %v; want INVALID_ARGUMENT naming the limit", err)
	}
}
