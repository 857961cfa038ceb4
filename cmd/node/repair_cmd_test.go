package main

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// stepping is a procedure whose one step runs until the test lets it go:
// a procedure that is running, for the guarded bypass.
type stepping struct {
	procedure.Base
	Done bool
}

// letGo ends stepping's steps (one test at a time uses it).
var letGo chan struct{}

func (p *stepping) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done {
		return procedure.Done(), nil
	}
	select {
	case <-letGo:
	case <-ctx.Done():
		return procedure.Step{}, ctx.Err()
	}
	p.Done = true
	return procedure.More(), nil
}

func (p *stepping) Rollback(*procedure.Context) error { return nil }

// TestRepairCommands runs the repair kit's commands in order against one
// cluster, as an operator would: each row sees what the earlier ones did.
// Two masters led by the second, so that the commands reach a standby
// first, which forwards them; the records must still name the caller's
// own address.
func TestRepairCommands(t *testing.T) {
	letGo = make(chan struct{})
	// SteadyLeader: the records name the standby that forwarded each
	// command, which a leadership change under load would make the leader.
	fc := clustertest.New(t, clustertest.Config{Masters: 2, RegionServers: 2, SteadyLeader: true, Register: func(r *procedure.Registry) error {
		return r.Register("stepping", 1, func() procedure.Procedure { return &stepping{} })
	}})
	fc.TransferLeadership(1)
	standby := fc.Master(0).ID
	cl := fc.Client()
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ","), "USER": "ann"}

	region := createOneRegionTable(t, fc, "t1")
	var demo []uint64
	for range 2 {
		id, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "2", "delay": "1h"}, "", "demo", 0)
		if err != nil {
			t.Fatal(err)
		}
		demo = append(demo, id)
	}
	running := fc.Submit(&stepping{}, "")
	_, x := fc.WaitLeader()
	testwait.For(t, 10*time.Second, "the stepping procedure running", func() bool {
		w, err := x.Why(running)
		return err == nil && w.Reason == "running"
	})
	R, RUN := region, idStr(running)
	refused := map[string]any{"error": map[string]any{"code": "FAILED_PRECONDITION", "exit_code": 1.0}}

	for _, tc := range []cliCase{
		// Maintenance mode.
		{name: "maintenance status off", args: []string{"cluster", "maintenance", "status", "--json"}, json: map[string]any{"on": false}},
		{name: "maintenance on unconfirmed", args: []string{"cluster", "maintenance", "on", "--reason", "disk swap"}, code: 2,
			stdout: "dry run: turn maintenance mode on", stderr: "add --yes to do it"},
		{name: "maintenance on unconfirmed json", args: []string{"cluster", "maintenance", "on", "--json"}, code: 2,
			json: map[string]any{"dry_run": true, "confirm": "add --yes to do it", "exit_code": 2.0, "record": 0.0, "maintenance": map[string]any{"on": false}}},
		{name: "maintenance still off", args: []string{"cluster", "maintenance", "status"}, stdout: "maintenance mode off"},
		{name: "maintenance on", args: []string{"cluster", "maintenance", "on", "--reason", "disk swap", "--yes", "--json"},
			json: map[string]any{"dry_run": false, "record": anID{}, "maintenance": map[string]any{"on": true, "reason": "disk swap"}},
			then: func(t *testing.T, doc map[string]any, _ string) {
				if by, _ := doc["maintenance"].(map[string]any)["by"].(string); !strings.HasPrefix(by, "ann@") {
					t.Errorf("maintenance by %q, want the caller, ann@host:pid", by)
				}
			}},
		{name: "maintenance on again", args: []string{"cluster", "maintenance", "on", "--yes"}, stdout: "already on since"},
		{name: "create refused", args: []string{"table", "create", "t2", "--json"}, code: 1, json: refused},
		{name: "create refused human", args: []string{"table", "create", "t2"}, code: 1,
			stderr: "cluster in maintenance mode: new procedures are refused (on since"},
		{name: "submit refused human", args: []string{"proc", "submit", "sleep"}, code: 1, stderr: "an operator turned maintenance mode on"},
		{name: "status shows it", args: []string{"cluster", "status", "--json"}, json: map[string]any{"maintenance": map[string]any{"on": true, "reason": "disk swap"}}},
		{name: "status shows it human", args: []string{"cluster", "status"}, stdout: "maintenance  on since"},
		{name: "maintenance status on", args: []string{"cluster", "maintenance", "status"}, stdout: "maintenance mode on since"},
		{name: "maintenance off", args: []string{"cluster", "maintenance", "off"}, stdout: "done: maintenance mode off since"},
		{name: "maintenance no command", args: []string{"cluster", "maintenance"}, code: 2, stderr: "usage: baton cluster maintenance"},
		{name: "maintenance unknown", args: []string{"cluster", "maintenance", "up"}, code: 2, stderr: "unknown command"},
		{name: "maintenance off extra", args: []string{"cluster", "maintenance", "off", "now"}, code: 2, stderr: "takes no arguments"},

		// Region assign and unassign.
		{name: "assign unknown region", args: []string{"region", "assign", "nope", "--json"}, code: 1,
			json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "exit_code": 1.0}}},
		{name: "assign open region", args: []string{"region", "assign", R}, stdout: "already OPEN on"},
		{name: "assign override unconfirmed", args: []string{"region", "assign", R, "--override"}, code: 2, stdout: "dry run: region", stderr: "add --yes"},
		{name: "assign unknown server", args: []string{"region", "assign", R, "--server", "rs9"}, code: 1, stderr: `region server "rs9"`},
		{name: "unassign", args: []string{"region", "unassign", R, "--yes", "--wait"}, stdout: "done: close region " + R},
		{name: "unassigned", args: []string{"region", "list", "--json"}, json: map[string]any{"regions": []any{map[string]any{"state": "CLOSED", "server": ""}}}},
		{name: "assign", args: []string{"region", "assign", R, "--server", "rs1", "--wait", "--json"},
			json: map[string]any{"dry_run": false, "proc_id": anID{}, "state": "SUCCESS", "record": anID{}}},
		{name: "assigned", args: []string{"region", "list", "--json"}, json: map[string]any{"regions": []any{map[string]any{"state": "OPEN", "server": "rs1"}}}},
		{name: "unassign with server", args: []string{"region", "unassign", R, "--server", "rs1"}, code: 2, stderr: "unknown flag --server"},
		{name: "assign no region", args: []string{"region", "assign"}, code: 2, stderr: "want exactly one REGION"},

		// Server recovery.
		{name: "recover unknown", args: []string{"rs", "recover", "rs9", "--yes"}, code: 1, stderr: `region server "rs9"`},
		{name: "recover live", args: []string{"rs", "recover", "rs1", "--json"}, code: 1, json: refused,
			then: func(t *testing.T, doc map[string]any, _ string) {
				if msg, _ := doc["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "is live") || !strings.Contains(msg, "--override") {
					t.Errorf("refusal %q does not say the server is live and what to do", msg)
				}
			}},
		{name: "recover live override unconfirmed", args: []string{"rs", "recover", "rs1", "--override"}, code: 2, stdout: "dry run: expire the live rs1/"},

		// Cancel by filter.
		{name: "cancel no filter", args: []string{"proc", "cancel", "--yes"}, code: 2, stderr: "at least one filter"},
		{name: "cancel bad state", args: []string{"proc", "cancel", "--state", "SUCCESS"}, code: 2, stderr: "finished procedures cannot be cancelled"},
		{name: "cancel negative age", args: []string{"proc", "cancel", "--owner", "demo", "--older-than", "-1s"}, code: 2, stderr: "negative"},
		{name: "cancel dry run", args: []string{"proc", "cancel", "--owner", "demo", "--dry-run", "--json"},
			json: map[string]any{"dry_run": true, "record": 0.0}, count: map[string]int{"cancelled": 2, "skipped": 0}, absent: []string{"confirm"}},
		{name: "cancel dry run human", args: []string{"proc", "cancel", "--owner", "demo", "--type", "sleep", "--dry-run"}, stdout: "would cancel 2 procedures"},
		{name: "cancel unconfirmed", args: []string{"proc", "cancel", "--owner", "demo"}, code: 2, stdout: "would cancel 2", stderr: "add --yes"},
		{name: "cancel up to an id", args: []string{"proc", "cancel", "--owner", "demo", "--max-id", idStr(demo[0]), "--dry-run", "--json"},
			json: map[string]any{"dry_run": true, "cancelled": []any{map[string]any{"id": float64(demo[0])}}}},
		{name: "cancel bad max id", args: []string{"proc", "cancel", "--owner", "demo", "--max-id", "-1"}, code: 2, stderr: `--max-id "-1": want a whole number, 0 or more`},
		{name: "cancel", args: []string{"proc", "cancel", "--owner", "demo", "--yes", "--json"},
			json: map[string]any{"dry_run": false, "record": anID{}, "cancelled": []any{
				map[string]any{"id": float64(demo[0]), "abort_requested": true}, map[string]any{"id": float64(demo[1]), "abort_requested": true}}}},
		{name: "cancelled rolled back", args: []string{"proc", "wait", idStr(demo[1])}, code: 1, stderr: "ended ROLLEDBACK"},
		{name: "cancel none left", args: []string{"proc", "cancel", "--owner", "demo", "--yes"}, stdout: "no unfinished procedure matches"},
		{name: "cancel help", args: []string{"proc", "cancel", "-h"}, stdout: "usage: baton proc cancel"},

		// The guarded bypass.
		{name: "bypass running", args: []string{"proc", "bypass", RUN}, code: 1, stderr: "is running a step"},
		{name: "bypass running override unconfirmed", args: []string{"proc", "bypass", RUN, "--override", "--json"}, code: 2,
			json: map[string]any{"dry_run": true, "bypassed": []any{float64(running)}, "confirm": "add --yes to do it"}},
		{name: "bypass running override", args: []string{"proc", "bypass", RUN, "--override", "--yes"}, stdout: "done: bypass procedure " + RUN,
			then: func(*testing.T, map[string]any, string) { close(letGo) }}, // its step ends; it runs no other
		{name: "bypass unknown", args: []string{"proc", "bypass", "999999", "--yes"}, code: 1, stderr: "procedure 999999 does not exist (NOT_FOUND)"},
		{name: "bypass bad id", args: []string{"proc", "bypass", "x"}, code: 2, stderr: "positive integer"},

		// The records.
		{name: "repairs", args: []string{"cluster", "repairs", "--json"}, then: func(t *testing.T, doc map[string]any, _ string) {
			var got []string
			for _, r := range doc["repairs"].([]any) {
				r := r.(map[string]any)
				got = append(got, r["action"].(string)+" "+r["outcome"].(string))
				caller, _ := r["caller"].(string)
				if at, err := time.Parse(time.RFC3339, r["at"].(string)); err != nil || time.Since(at).Abs() > time.Minute {
					t.Errorf("record %v: at %v (%v), want about now", r["seq"], r["at"], err)
				}
				if !strings.HasPrefix(caller, "ann@") || r["peer"] == "" || r["via"] != standby || r["node"] != fc.Master(1).ID {
					t.Errorf("record %v: want caller ann@..., the client's address, via %s, recorded by %s", r, standby, fc.Master(1).ID)
				}
			}
			want := []string{"maintenance on done", "maintenance on done", "maintenance off done",
				"region assign refused", "region assign done", "region assign refused", "region unassign done", "region assign done",
				"rs recover refused", "proc cancel done", "proc cancel done",
				"proc bypass done", "proc bypass refused"}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Errorf("records:\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(want, "; "))
			}
		}},
		{name: "repairs human", args: []string{"cluster", "repairs", "--after", "12"}, stdout: "SEQ  TIME"},
		{name: "repairs after all", args: []string{"cluster", "repairs", "--after", "1000"}, stdout: "no repairs recorded"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, env) })
	}
	if p, err := cl.Wait(ctxT(t), running); err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("bypassed procedure: %v, %v", p, err)
	}
}

// The --yes rule is that a command which can take work away from the
// cluster acts only when confirmed. 'region unassign REGION' on a healthy
// OPEN region takes it offline, and it stays so (the cluster never does
// that by itself): without --yes it is a dry run, and the region stays
// open.
func TestRepairUnassignOfAServingRegionNeedsYes(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	cl := fc.Client()
	region := createOneRegionTable(t, fc, "t1")
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ","), "USER": "ann"}
	tc := cliCase{name: "unassign unconfirmed", args: []string{"region", "unassign", region}, code: 2,
		stdout: "dry run: close region", stderr: "add --yes"}
	tc.check(t, env)
	if regions, err := cl.ListRegions(ctxT(t), "t1"); err != nil || len(regions) != 1 || regions[0].GetState() != "OPEN" {
		t.Fatalf("after an unconfirmed unassign: %v, %v; want the region still OPEN", regions, err)
	}
}

// createOneRegionTable creates table name of one region in fc and returns
// the region's name.
func createOneRegionTable(t *testing.T, fc *clustertest.Cluster, name string) string {
	t.Helper()
	cl := fc.Client()
	create, err := cl.CreateTable(ctxT(t), "", name, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	fc.MustSucceed(create, 30*time.Second)
	regions, err := cl.ListRegions(ctxT(t), name)
	if err != nil || len(regions) != 1 {
		t.Fatalf("regions %v, %v", regions, err)
	}
	return regions[0].GetName()
}
