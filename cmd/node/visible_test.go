package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestSmallerVisible: a lock on a missing region is NOT_FOUND (exit 1)
// with advice about names, not locks; one region is "1 region"; the help
// of proc submit lists the types and their arguments.
func TestSmallerVisible(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	addr := "--addr=" + fc.AdminAddrs()[0]

	code, stdout, stderr := runCLI(t, nil, "lock", "acquire", "--kind", "region", "--name", "nosuch", addr, "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if code != exitFailed || !jsonHas(doc, map[string]any{"error": map[string]any{"code": "NOT_FOUND", "exit_code": 1.0}}) ||
		!strings.Contains(stderr, `region "nosuch"`) || !strings.Contains(stderr, "baton region list") || strings.Contains(stderr, "no such lock") {
		t.Errorf("lock acquire nosuch: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, nil, "table", "create", "t1", "--regions", "1", "--wait", addr)
	if code != 0 || !strings.Contains(stdout, "(1 region)") || strings.Contains(stdout, "1 regions") {
		t.Fatalf("table create: exit %d\n%s%s", code, stdout, stderr)
	}
	id := regexp.MustCompile(`procedure (\d+)`).FindStringSubmatch(stdout)[1]
	code, stdout, stderr = runCLI(t, nil, "proc", "get", id, addr, "--json")
	if code != 0 || !strings.Contains(stdout, `"result": "table default:t1 created with 1 region"`) {
		t.Errorf("proc get: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, nil, "rs", "regions", "rs1", addr)
	if code != 0 || !strings.Contains(stdout, "hosts 1 region by its own answer; the master assigns it 1 region") {
		t.Errorf("rs regions: exit %d\n%s%s", code, stdout, stderr)
	}

	// Where help goes (stdout or stderr) is not this test's business.
	code, stdout, stderr = runCLI(t, nil, "proc", "submit", "-h")
	help := stdout + stderr
	if code != 0 {
		t.Errorf("proc submit -h: exit %d", code)
	}
	for _, d := range diag.Docs() {
		if !regexp.MustCompile(`(?m)^  ` + d.Name + ` +` + regexp.QuoteMeta(d.Summary) + `$`).MatchString(help) {
			t.Errorf("proc submit -h does not describe %s:\n%s", d.Name, help)
		}
		for _, a := range d.Args {
			if !regexp.MustCompile(`(?m)^    ` + a.Name + ` +.*\(default ` + regexp.QuoteMeta(a.Default) + `\)$`).MatchString(help) {
				t.Errorf("proc submit -h does not describe %s's %s:\n%s", d.Name, a.Name, help)
			}
		}
	}
}

// TestDeadServerAfterFailover: after a leader change a region server that
// no longer reaches the masters is not shown live: rs list says
// unconfirmed and never heard from (this leader), and table list counts
// its regions as offline on a dead server, while the leases, long here,
// keep it from being expired.
func TestDeadServerAfterFailover(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 2, Domain: func(_ int, c *domain.Config) {
		c.ServerLease.SoftLimit, c.ServerLease.HardLimit = 30*time.Minute, time.Hour
	}})
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
	run := func(args ...string) (string, string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		return stdout, stderr
	}
	run("table", "create", "t", "--regions", "2", "--wait")
	var regions struct {
		Regions []struct{ Name, Server string } `json:"regions"`
	}
	stdout, _ := run("region", "list", "--json")
	if err := json.Unmarshal([]byte(stdout), &regions); err != nil {
		t.Fatal(err)
	}
	// One region on each server, wherever placement put them.
	if regions.Regions[0].Server == regions.Regions[1].Server {
		other := map[string]string{"rs1": "rs2", "rs2": "rs1"}[regions.Regions[0].Server]
		run("region", "move", regions.Regions[0].Name, "--to", other, "--wait")
	}

	// rs2 stops reaching the masters; the leader dies.
	h := fc.Faults().MustAdd(rpcfault.Rule{Name: "cut rs2", Methods: []string{"/baton.rs.v1.Master/"}, Fault: rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			r, ok := c.Request.(interface{ GetServerId() string })
			return ok && r.GetServerId() == "rs2"
		}})
	t.Cleanup(h.Remove)
	old, _ := fc.WaitLeader()
	fc.Kill(old)
	fc.WaitLeader(old)

	type server struct {
		ID         string `json:"id"`
		LeaseState string `json:"lease_state"`
		AgeMs      *int64 `json:"last_heartbeat_age_ms"`
		Renewal    string `json:"last_renewal_at"`
	}
	var servers struct {
		Servers []server `json:"servers"`
	}
	testwait.ForNil(t, 30*time.Second, "rs1 heard from by the new leader", func() error {
		stdout, _ := run("rs", "list", "--json")
		servers.Servers = nil
		if err := json.Unmarshal([]byte(stdout), &servers); err != nil {
			return err
		}
		if len(servers.Servers) != 2 || servers.Servers[0].LeaseState != "live" {
			return fmt.Errorf("servers %s", stdout)
		}
		return nil
	})
	rs1, rs2 := servers.Servers[0], servers.Servers[1]
	if rs1.AgeMs == nil || *rs1.AgeMs < 0 || rs1.Renewal == "" {
		t.Errorf("rs1 %+v: want a heartbeat age", rs1)
	}
	if rs2.ID != "rs2" || rs2.LeaseState != "unconfirmed" || rs2.AgeMs != nil {
		t.Errorf("rs2 %+v: want unconfirmed, never heard from", rs2)
	}
	stdout, _ = run("rs", "list")
	if !regexp.MustCompile(`(?m)^rs2 .* unconfirmed .* never \(this leader\)$`).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^rs1 .* live .* [0-9.]+m?s ago$`).MatchString(stdout) || !strings.Contains(stdout, "LAST HEARTBEAT") {
		t.Errorf("rs list:\n%s", stdout)
	}

	stdout, _ = run("table", "list", "--json")
	var tables struct {
		Tables []struct {
			RegionCount int            `json:"region_count"`
			Counts      map[string]int `json:"region_counts"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(stdout), &tables); err != nil {
		t.Fatal(err)
	}
	if len(tables.Tables) != 1 || tables.Tables[0].RegionCount != 2 ||
		!maps.Equal(tables.Tables[0].Counts, map[string]int{"open": 1, "opening": 0, "closing": 0, "offline_on_dead_server": 1}) {
		t.Errorf("table list --json:\n%s", stdout)
	}
	stdout, _ = run("table", "list")
	if !strings.Contains(stdout, "2 (1 OPEN, 1 offline on a dead server)") {
		t.Errorf("table list:\n%s", stdout)
	}
}

// TestUnavailableNamesEachAddress: when no master answers, the error says
// for each address how its last try failed, not the whole list at once.
func TestUnavailableNamesEachAddress(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 3})
	leader, _ := fc.WaitLeader()
	other := (leader + 1) % 3
	survivor := 3 - leader - other
	fc.Kill(leader)
	fc.Kill(other)
	silent := testnet.SilentAddr(t)
	dead, alone := clustertest.DeadAddr(t), fc.AdminAddrs()[survivor]
	addr := strings.Join([]string{dead, silent, alone}, ",")

	code, stdout, stderr := runCLI(t, nil, "proc", "get", "1", "--addr", addr, "--timeout", "3s", "--json")
	var doc struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	msg := doc.Error.Message
	if code != exitUnavailable || doc.Error.Code != "UNAVAILABLE" || !strings.HasPrefix(msg, "no leader answered: ") ||
		!strings.Contains(msg, dead+": connection refused") ||
		!strings.Contains(msg, silent+": timed out") ||
		!regexp.MustCompile(regexp.QuoteMeta(alone)+`: not the leader`).MatchString(msg) {
		t.Errorf("exit %d, message %q\nstderr %s", code, msg, stderr)
	}
	if strings.Contains(stderr, addr) {
		t.Errorf("stderr repeats the whole --addr list:\n%s", stderr)
	}
}

// TestChildrenShown: proc list shows roots, proc list --all their children
// too with the parent's id, and proc get a procedure's children with their
// states.
func TestChildrenShown(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	cl := fc.Client()
	parent, err := cl.Submit(ctxT(t), "fanout", map[string]string{"children": "2", "steps": "1", "delay": "1h"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var kids []uint64
	testwait.ForNil(t, 30*time.Second, "the fanout's children", func() error {
		p, err := cl.Get(ctxT(t), parent)
		if err != nil || len(p.GetChildren()) != 2 || p.GetState() != "WAITING" {
			return fmt.Errorf("parent %v, %v", p, err)
		}
		kids = p.GetChildren()
		return nil
	})
	P := idStr(parent)
	type proc struct {
		ID       uint64 `json:"id"`
		ParentID uint64 `json:"parent_id"`
		Type     string `json:"type"`
		State    string `json:"state"`
	}
	list := func(args ...string) []proc {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, append([]string{"proc", "list", "--json"}, args...)...)
		var doc struct {
			Procedures []proc `json:"procedures"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); code != 0 || err != nil {
			t.Fatalf("proc list %v: exit %d, %v\n%s%s", args, code, err, stdout, stderr)
		}
		return doc.Procedures
	}
	if got := list(); len(got) != 1 || got[0].ID != parent {
		t.Errorf("proc list: %+v, want the root alone", got)
	}
	got := list("--all")
	if len(got) != 3 || got[0].ID != parent || got[1].ID != kids[0] || got[1].ParentID != parent || got[2].ParentID != parent || got[1].Type != "sleep" {
		t.Errorf("proc list --all: %+v, want the root and its 2 children", got)
	}
	code, stdout, stderr := runCLI(t, env, "proc", "list", "--all")
	if code != 0 || !regexp.MustCompile(`(?m)^`+idStr(kids[1])+` +`+P+` +sleep +WAITING`).MatchString(stdout) {
		t.Errorf("proc list --all: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, env, "proc", "get", P, "--json")
	var doc struct {
		Children []uint64 `json:"children"`
		Kids     []proc   `json:"child_procedures"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); code != 0 || err != nil {
		t.Fatalf("proc get: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	if len(doc.Children) != 2 || len(doc.Kids) != 2 || doc.Kids[0].ID != kids[0] || doc.Kids[1].ID != kids[1] ||
		doc.Kids[0].Type != "sleep" || !strings.HasPrefix(doc.Kids[0].State, "WAITING") {
		t.Errorf("proc get --json: %s", stdout)
	}
	code, stdout, stderr = runCLI(t, env, "proc", "get", P)
	if code != 0 || !strings.Contains(stdout, "CHILD") ||
		!regexp.MustCompile(`(?m)^`+idStr(kids[0])+` +sleep +WAITING`).MatchString(stdout) {
		t.Errorf("proc get: exit %d\n%s%s", code, stdout, stderr)
	}
	// A procedure without children says none in --json, not null.
	code, stdout, _ = runCLI(t, env, "proc", "get", idStr(kids[0]), "--json")
	if code != 0 || !strings.Contains(stdout, `"child_procedures": []`) {
		t.Errorf("proc get child: exit %d\n%s", code, stdout)
	}
}

// TestRSRegionsDirect: rs regions --direct asks the region server itself,
// and still answers when no master does.
func TestRSRegionsDirect(t *testing.T) {
	// Heartbeats rare and leases long: the region server, cut off from
	// the masters below, must not self-fence (drop its regions) while the
	// test asks it.
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1, Domain: func(_ int, c *domain.Config) {
		c.ServerLease.SoftLimit, c.ServerLease.HardLimit, c.HeartbeatInterval = 30*time.Minute, time.Hour, time.Minute
	}})
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	rsAddr := fc.RegionServers()["rs1"].Addr()
	if code, stdout, stderr := runCLI(t, env, "table", "create", "t", "--regions", "2", "--wait"); code != 0 {
		t.Fatalf("table create: exit %d\n%s%s", code, stdout, stderr)
	}
	type doc struct {
		Server       string   `json:"server"`
		Hosted       []string `json:"hosted"`
		Assigned     []string `json:"assigned"`
		Direct       string   `json:"direct"`
		StartCode    uint64   `json:"start_code"`
		MastersError string   `json:"masters_error"`
	}
	get := func(args ...string) (doc, string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, append([]string{"rs", "regions", "rs1", "--direct", rsAddr}, args...)...)
		var d doc
		if code != 0 {
			t.Fatalf("rs regions --direct %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		if slices.Contains(args, "--json") {
			if err := json.Unmarshal([]byte(stdout), &d); err != nil {
				t.Fatal(err)
			}
		}
		return d, stdout
	}
	d, _ := get("--json")
	if d.Server != "rs1" || len(d.Hosted) != 2 || !slices.Equal(d.Hosted, d.Assigned) || d.Direct != rsAddr || d.StartCode == 0 || d.MastersError != "" {
		t.Errorf("--direct with the masters up: %+v", d)
	}
	_, stdout := get()
	if !strings.Contains(stdout, "asked region server rs1 at "+rsAddr+" directly") || !strings.Contains(stdout, "hosts 2 regions by its own answer; the master assigns it 2 regions") {
		t.Errorf("human:\n%s", stdout)
	}

	// No master at all: the region server's answer still comes.
	fc.Kill(0)
	d, _ = get("--json", "--timeout", "500ms")
	if len(d.Hosted) != 2 || d.Assigned != nil || !strings.Contains(d.MastersError, "no leader answered") {
		t.Errorf("--direct with no master: %+v", d)
	}
	_, stdout = get("--timeout", "500ms")
	if !strings.Contains(stdout, "hosts 2 regions by its own answer; no master answered") || !strings.Contains(stdout, "  "+d.Hosted[0]+"\n") {
		t.Errorf("human, no master:\n%s", stdout)
	}

	// The wrong server, or none, at the address.
	code, stdout, stderr := runCLI(t, env, "rs", "regions", "rs9", "--direct", rsAddr, "--json")
	if code != exitFailed || !strings.Contains(stdout, `"code": "NOT_FOUND"`) || !strings.Contains(stderr, `is region server "rs1", not "rs9"`) {
		t.Errorf("wrong server: exit %d\n%s%s", code, stdout, stderr)
	}
	dead := clustertest.DeadAddr(t)
	code, _, stderr = runCLI(t, env, "rs", "regions", "rs1", "--direct", dead, "--timeout", "2s")
	if code != exitUnavailable || !strings.Contains(stderr, "region server at "+dead) || !strings.Contains(stderr, "--direct names its --grpc-addr") {
		t.Errorf("dead address: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, env, "rs", "regions", "rs1", "--direct", "nope")
	if code != exitUsage || !strings.Contains(stderr, "want host:port") {
		t.Errorf("bad address: exit %d\n%s", code, stderr)
	}
}
