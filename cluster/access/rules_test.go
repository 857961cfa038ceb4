package access

import (
	"slices"
	"testing"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Who may call, in goldenRules.
const (
	clients = true
	masters = false
)

// goldenRules is the rule of every admin method the API had when its
// rules moved into admin.proto, as admin.proto declares it: who may call
// (clients holding the permission, or masters only), the permission,
// audited, starts procedures (counted by --submit-rate). A change of an
// existing method's rule is a change here too, in the same diff: the
// security of the calls operators rely on moves only on purpose. A new
// method needs no line: its rule is declared once, beside its rpc, and
// optionspb's and cluster/admin's tests check it is whole.
var goldenRules = []struct {
	method    string
	clientMay bool
	perm      security.Permission
	audited   bool
	submits   bool
}{
	{"SubmitProcedure", clients, security.PermOperate, true, true},
	{"GetProcedure", clients, security.PermRead, false, false},
	{"ListProcedures", clients, security.PermRead, false, false},
	{"WatchProcedure", clients, security.PermRead, false, false},
	{"AbortProcedure", clients, security.PermAdmin, true, false},
	{"PauseProcedure", clients, security.PermOperate, true, false},
	{"ResumeProcedure", clients, security.PermOperate, true, false},
	{"AckResult", clients, security.PermOperate, true, false},
	{"ClusterStatus", clients, security.PermRead, false, false},
	{"AddPeer", clients, security.PermAdmin, true, false},
	{"RemovePeer", clients, security.PermAdmin, true, false},
	{"TransferLeadership", clients, security.PermAdmin, true, false},
	{"RegisterNode", masters, security.PermNone, false, false},
	{"CreateNamespace", clients, security.PermOperate, true, true},
	{"DeleteNamespace", clients, security.PermAdmin, true, true},
	{"ListNamespaces", clients, security.PermRead, false, false},
	{"GetNamespace", clients, security.PermRead, false, false},
	{"CreateTable", clients, security.PermOperate, true, true},
	{"DeleteTable", clients, security.PermAdmin, true, true},
	{"EnableTable", clients, security.PermOperate, true, true},
	{"DisableTable", clients, security.PermOperate, true, true},
	{"DescribeTable", clients, security.PermRead, false, false},
	{"ListTables", clients, security.PermRead, false, false},
	{"ListRegions", clients, security.PermRead, false, false},
	{"MoveRegion", clients, security.PermOperate, true, true},
	{"ListServers", clients, security.PermRead, false, false},
	{"ServerRegions", clients, security.PermRead, false, false},
	{"Balance", clients, security.PermOperate, true, true},
	{"AcquireLock", clients, security.PermOperate, true, true},
	{"LockHeartbeat", clients, security.PermOperate, false, false},
	{"ReleaseLock", clients, security.PermOperate, true, false},
	{"AssignRegion", clients, security.PermAdmin, true, true},
	{"UnassignRegion", clients, security.PermAdmin, true, true},
	{"RecoverServer", clients, security.PermAdmin, true, true},
	{"CancelProcedures", clients, security.PermAdmin, true, true},
	{"BypassProcedure", clients, security.PermAdmin, true, true},
	{"SetMaintenance", clients, security.PermAdmin, true, false},
	{"GetMaintenance", clients, security.PermRead, false, false},
	{"ListRepairs", clients, security.PermRead, false, false},
	{"ListLocks", clients, security.PermRead, false, false},
	{"ProcedureStats", clients, security.PermRead, false, false},
	{"WhoAmI", clients, security.PermNone, false, false},
	{"AclGrant", clients, security.PermAdmin, true, false},
	{"AclRevoke", clients, security.PermAdmin, true, false},
	{"AclCreateToken", clients, security.PermAdmin, true, false},
	{"AclDeleteToken", clients, security.PermAdmin, true, false},
	{"AclList", clients, security.PermAdmin, false, false},
	{"ListAudit", clients, security.PermAdmin, false, false},
	{"AppendAudit", masters, security.PermNone, false, false},
	{"ForwardReads", masters, security.PermNone, false, false},
}

// adminServiceMethods are the short names of every method the admin
// service serves, unary and streaming.
func adminServiceMethods() []string {
	var all []string
	for _, m := range adminpb.Admin_ServiceDesc.Methods {
		all = append(all, m.MethodName)
	}
	for _, s := range adminpb.Admin_ServiceDesc.Streams {
		all = append(all, s.StreamName)
	}
	return all
}

// TestAdminRulesAreTheGoldenTable: the rules read from admin.proto's
// options are goldenRules, method for method, for every method goldenRules
// names, and admin.proto gives every method of the service a rule.
func TestAdminRulesAreTheGoldenTable(t *testing.T) {
	if rulesErr != nil {
		t.Fatal(rulesErr)
	}
	all := adminServiceMethods()
	if len(adminRules) != len(all) {
		t.Errorf("%d methods, %d rules read from admin.proto", len(all), len(adminRules))
	}
	for _, g := range goldenRules {
		if !slices.Contains(all, g.method) {
			t.Errorf("goldenRules names %s, which the admin service lacks", g.method)
		}
		r, ok := adminRules[security.AdminService+g.method]
		want := Rule{ClientMay: g.clientMay, Perm: g.perm, Audited: g.audited, Submits: g.submits}
		if !ok || r != want {
			t.Errorf("%s: admin.proto declares %+v (found %v); golden %+v", g.method, r, ok, want)
		}
	}
}

// TestEveryAdminMethodHasAPermission: a method added to admin.proto must
// be given a permission (or be made a master's) on purpose, in its rule;
// one the service lacks needs admin, the closed default.
func TestEveryAdminMethodHasAPermission(t *testing.T) {
	for _, n := range adminServiceMethods() {
		if _, ok := adminRules[security.AdminService+n]; !ok {
			t.Errorf("admin method %s has no rule in admin.proto", n)
		}
	}
	// The stream interceptor audits a stream once it ends (SnapshotSave:
	// the whole state leaves the cluster); one that starts procedures it
	// does not rate-limit as a submission.
	for _, s := range adminpb.Admin_ServiceDesc.Streams {
		if slices.Contains(SubmitMethods(), s.StreamName) {
			t.Errorf("stream %s starts procedures: the stream interceptor does not limit submissions", s.StreamName)
		}
	}
	for _, c := range []struct {
		method string
		want   security.Permission
	}{{"ListTables", security.PermRead}, {"CreateTable", security.PermOperate}, {"DeleteTable", security.PermAdmin}, {"SomethingNew", security.PermAdmin}} {
		if got, ok := MethodPermission(c.method); !ok || got != c.want {
			t.Errorf("MethodPermission(%s) = %v, %v; want %v", c.method, got, ok, c.want)
		}
	}
	if _, ok := MethodPermission("RegisterNode"); ok {
		t.Error("RegisterNode open to clients")
	}
	if !Audited("CreateTable") || Audited("LockHeartbeat") || Audited("ListAudit") || Audited("ListTables") {
		t.Error("Audited: want CreateTable only")
	}
}
