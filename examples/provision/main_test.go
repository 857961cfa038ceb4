package main

import (
	"os"
	"strings"
	"testing"

	"github.com/baton-dev/baton/examples/provisionproc"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/procedure/proceduretest"
)

func Example() {
	if err := run(os.Stdout, ""); err != nil {
		panic(err)
	}
	// Output:
	// web-1: SUCCESS
	// db-2: ROLLEDBACK (db-2: configuration failed: disk not found)
	// hosts: [web-1=running]
}

// TestRerunResumes: a second run on the same log finds both procedures by
// their nonces and starts nothing again.
func TestRerunResumes(t *testing.T) {
	dir := t.TempDir()
	var first, second strings.Builder
	if err := run(&first, dir); err != nil {
		t.Fatal(err)
	}
	if err := run(&second, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(second.String(), "web-1: SUCCESS") {
		t.Fatalf("rerun:\n%s", second.String())
	}
}

// TestProvisionSurvivesEveryCrash proves the procedure with the public
// crash harness: a crash after every store write, and a rollback after
// every one with each rollback step run twice.
func TestProvisionSurvivesEveryCrash(t *testing.T) {
	for _, host := range []string{"web-1", "db-2"} {
		c := proceduretest.Case{
			Register: provisionproc.Register,
			New:      func() procedure.Procedure { return &provisionproc.Provision{Host: host} },
			Env:      func() any { return provisionproc.NewDatacenter("db-2") },
			Effects:  func(env any) any { return env.(*provisionproc.Datacenter).Snapshot() },
		}
		proceduretest.RecoveryAndDoubleExecution(t, c)
		proceduretest.RollbackAndDoubleExecution(t, c)
	}
}
