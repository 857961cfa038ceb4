package access

import (
	"slices"
	"testing"
)

// startsNoProcedure are the admin methods whose rule in admin.proto does
// not say starts_procedure (SubmitMethods), each with why it starts no
// procedure. A method that is in neither fails
// TestSubmitMethodsCoverEveryProcedureStart: whoever adds an RPC says
// which it is, so that one starting procedures cannot escape the submit
// rate.
var startsNoProcedure = map[string]string{
	"GetProcedure": "read", "ListProcedures": "read", "ClusterStatus": "read", "ListNamespaces": "read",
	"GetNamespace": "read", "DescribeTable": "read", "ListTables": "read", "ListRegions": "read",
	"ListServers": "read", "ServerRegions": "read", "GetMaintenance": "read", "ListRepairs": "read",
	"ListLocks": "read", "ProcedureStats": "read", "WhoAmI": "read", "AclList": "read", "ListAudit": "read",
	"WatchProcedure":     "read",
	"SnapshotSave":       "a read of the whole state, into a file",
	"AbortProcedure":     "rolls back a procedure that exists",
	"PauseProcedure":     "pauses a procedure that exists",
	"ResumeProcedure":    "resumes a procedure that exists",
	"AckResult":          "acknowledges a procedure's result",
	"LockHeartbeat":      "renews the lock procedure AcquireLock started",
	"ReleaseLock":        "ends the lock procedure AcquireLock started",
	"AddPeer":            "a Raft membership change",
	"RemovePeer":         "a Raft membership change",
	"TransferLeadership": "a Raft leadership transfer",
	"SetMaintenance":     "a replicated flag",
	"AclGrant":           "an access control entry", "AclRevoke": "an access control entry",
	"AclCreateToken": "an access control entry", "AclDeleteToken": "an access control entry",
	"RegisterNode": "masters' own: an address", "AppendAudit": "masters' own: audit records", "ForwardReads": "masters' own: reads, served as each alone would be",
}

// TestSubmitMethodsCoverEveryProcedureStart: every method of the admin
// service is either limited as a submission or said to start nothing,
// and SubmitMethods names only methods that exist.
func TestSubmitMethodsCoverEveryProcedureStart(t *testing.T) {
	all := adminServiceMethods()
	for _, m := range all {
		_, quiet := startsNoProcedure[m]
		submits := slices.Contains(SubmitMethods(), m)
		switch {
		case submits && quiet:
			t.Errorf("%s says starts_procedure and is said to start no procedure (%s)", m, startsNoProcedure[m])
		case !submits && !quiet:
			t.Errorf("admin method %s neither says starts_procedure in admin.proto (it starts procedures: limited by --submit-rate) nor in startsNoProcedure (say why it starts none)", m)
		}
	}
	for _, m := range SubmitMethods() {
		if !slices.Contains(all, m) {
			t.Errorf("SubmitMethods names %s, which the admin service lacks", m)
		}
		if !Audited(m) {
			t.Errorf("%s starts procedures but is not audited", m)
		}
	}
	for m := range startsNoProcedure {
		if !slices.Contains(all, m) {
			t.Errorf("startsNoProcedure names %s, which the admin service lacks", m)
		}
	}
}
