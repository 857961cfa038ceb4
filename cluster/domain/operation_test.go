package domain

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Each operation's file registers its procedure type and its builder from
// init, so nothing lists them in one place: this checks none of the
// existing ones went missing (a type the registry does not know cannot be
// read back after a restart; a missing builder makes its admin call
// answer UNIMPLEMENTED). The tables pin what exists: a new operation adds
// its own type and builder, which its own test exercises, without a line
// here.
func TestEveryOperationRegistersItself(t *testing.T) {
	reg := procedure.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	// The type names are stored in every procedure record: they never change.
	types := map[string]string{
		"Balance": "Balance", "CreateNamespace": "CreateNamespace", "CreateTable": "CreateTable",
		"DeleteNamespace": "DeleteNamespace", "DeleteTable": "DeleteTable", "DisableTable": "DisableTable",
		"EnableTable": "EnableTable", "Lock": "LockProcedure", "ServerCrash": "ServerCrash",
		"TransitRegionState": "TransitRegionState",
	}
	if got := reg.Types(); len(got) != len(procedureTypes) {
		t.Fatalf("registered types %v, want the %d the operations' files register", got, len(procedureTypes))
	}
	for name, goType := range types {
		p, err := reg.New(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := reflect.TypeOf(p).Elem().Name(); n != goType {
			t.Errorf("type %s decodes into a %s, want a %s", name, n, goType)
		}
	}
	for _, m := range []string{
		adminpb.Admin_Balance_FullMethodName, adminpb.Admin_CreateNamespace_FullMethodName,
		adminpb.Admin_CreateTable_FullMethodName, adminpb.Admin_DeleteNamespace_FullMethodName,
		adminpb.Admin_DeleteTable_FullMethodName, adminpb.Admin_DisableTable_FullMethodName,
		adminpb.Admin_EnableTable_FullMethodName, adminpb.Admin_MoveRegion_FullMethodName,
	} {
		if !slices.Contains(BuildMethods(), m) {
			t.Errorf("Build does not serve %s", m)
		}
	}
	if !slices.IsSorted(BuildMethods()) {
		t.Errorf("BuildMethods %v: not sorted", BuildMethods())
	}
}

// Build makes from each admin request the procedure its call asks for,
// validating it as the procedure's constructor does, and refuses a
// request of another method's type or a method that starts nothing.
func TestBuildMakesTheProcedureTheRequestAsksFor(t *testing.T) {
	d := &Domain{}
	table := &adminpb.TableRequest{Namespace: "ns", Name: "t"}
	for _, c := range []struct {
		method string
		req    proto.Message
		want   string
	}{
		{adminpb.Admin_CreateTable_FullMethodName, &adminpb.CreateTableRequest{Namespace: "ns", Name: "t", Regions: 3}, "CreateTable"},
		{adminpb.Admin_DeleteTable_FullMethodName, table, "DeleteTable"},
		{adminpb.Admin_EnableTable_FullMethodName, table, "EnableTable"},
		{adminpb.Admin_DisableTable_FullMethodName, table, "DisableTable"},
		{adminpb.Admin_CreateNamespace_FullMethodName, &adminpb.NamespaceRequest{Name: "ns"}, "CreateNamespace"},
		{adminpb.Admin_DeleteNamespace_FullMethodName, &adminpb.NamespaceRequest{Name: "ns"}, "DeleteNamespace"},
		{adminpb.Admin_Balance_FullMethodName, &adminpb.BalanceRequest{}, "Balance"},
	} {
		p, err := d.Build(c.method, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
		if n := reflect.TypeOf(p).Elem().Name(); n != c.want {
			t.Errorf("%s built a %s, want a %s", c.method, n, c.want)
		}
	}
	if p, err := d.Build(adminpb.Admin_CreateTable_FullMethodName, &adminpb.CreateTableRequest{Namespace: "ns", Name: "t", Regions: 3}); err != nil {
		t.Fatal(err)
	} else if ct := p.(*CreateTable); ct.Regions != 3 || ct.full() != "ns:t" {
		t.Errorf("CreateTable of ns:t in 3 regions built as %+v", ct)
	}
	if _, err := d.Build(adminpb.Admin_CreateTable_FullMethodName, &adminpb.CreateTableRequest{Namespace: "ns", Name: "t", Regions: MaxRegions + 1}); !errors.Is(err, procedure.ErrInvalid) {
		t.Errorf("CreateTable of %d regions: %v, want invalid", MaxRegions+1, err)
	}
	if _, err := d.Build(adminpb.Admin_DeleteTable_FullMethodName, &adminpb.TableRequest{Namespace: "ns"}); !errors.Is(err, procedure.ErrInvalid) {
		t.Errorf("DeleteTable without a name: %v, want invalid", err)
	}
	if _, err := d.Build(adminpb.Admin_CreateTable_FullMethodName, table); err == nil {
		t.Error("CreateTable built from a TableRequest")
	}
	if _, err := d.Build(adminpb.Admin_GetProcedure_FullMethodName, &adminpb.GetProcedureRequest{}); err == nil {
		t.Error("GetProcedure built a procedure")
	}
}
