package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// anID in an expected JSON document stands for any positive number.
type anID struct{}

// jsonHas compares a decoded JSON value with want, where a map in want
// needs only the keys it lists (at any depth, arrays included: an array
// must have as many elements as want's).
func jsonHas(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !jsonHas(g[k], v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !jsonHas(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	return bytes.Equal(gb, wb)
}

// cliCase is one command run and what it must do.
type cliCase struct {
	name   string
	env    map[string]string // instead of the table's, if not nil
	before func()            // run first, to change the cluster
	args   []string
	argf   func() []string // instead of args, for names known only when the row runs
	code   int
	json   map[string]any // expected top-level values (maps: only the keys they list; anID: any id)
	absent []string       // top-level keys the JSON document must not have
	count  map[string]int // top-level arrays and their lengths
	stdout string         // substring of the human output
	stderr string         // substring of stderr
	// then checks what depends on the cluster's answers to earlier rows.
	then func(t *testing.T, doc map[string]any, stdout string)
}

// check runs tc in-process and checks the exit code, that failures
// explain themselves on stderr, that --json prints exactly one document,
// and the expectations. It returns the document, if any.
func (tc cliCase) check(t *testing.T, env map[string]string) map[string]any {
	t.Helper()
	if tc.before != nil {
		tc.before()
	}
	if tc.env != nil {
		env = tc.env
	}
	if tc.argf != nil {
		tc.args = tc.argf()
	}
	code, stdout, stderr := runCLI(t, env, tc.args...)
	if code != tc.code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
	}
	if tc.code != 0 && stderr == "" {
		t.Fatal("no message on stderr")
	}
	var doc map[string]any
	if strings.Contains(strings.Join(tc.args, " "), "--json") && (tc.code != 2 || tc.json != nil) {
		dec := json.NewDecoder(strings.NewReader(stdout))
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
		}
		if dec.More() {
			t.Fatalf("more than one JSON document:\n%s", stdout)
		}
	}
	for k, want := range tc.json {
		if _, ok := want.(anID); ok {
			if n, ok := doc[k].(float64); !ok || n <= 0 {
				t.Errorf("%s = %#v, want an id", k, doc[k])
			}
		} else if !jsonHas(doc[k], want) {
			t.Errorf("%s = %#v, want %#v", k, doc[k], want)
		}
	}
	for _, k := range tc.absent {
		if _, ok := doc[k]; ok {
			t.Errorf("key %q present: %v", k, doc[k])
		}
	}
	for k, n := range tc.count {
		if a, ok := doc[k].([]any); !ok || len(a) != n {
			t.Errorf("%s = %#v, want %d elements", k, doc[k], n)
		}
	}
	if !strings.Contains(stdout, tc.stdout) {
		t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
	}
	if !strings.Contains(stderr, tc.stderr) {
		t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
	}
	if tc.then != nil {
		tc.then(t, doc, stdout)
	}
	return doc
}

// TestDomainCommands runs the namespace, table, region, rs and balance
// commands in order against one cluster: each case sees what the previous
// ones did. Two masters led by the second, so that the first address the
// commands try is a standby, which forwards.
func TestDomainCommands(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 2, RegionServers: 2, Domain: func(_ int, d *domain.Config) {
		// A region server whose heartbeats stop stays suspect for the rest
		// of the test instead of expiring a second later.
		d.ServerLease.HardLimit = time.Hour
	}})
	fc.TransferLeadership(1)
	cl := fc.Client()
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
	started := map[string]any{"id": anID{}, "proc_id": anID{}}
	succeeded := map[string]any{"id": anID{}, "proc_id": anID{}, "state": "SUCCESS", "procedure": map[string]any{"state": "SUCCESS"}}
	notFound := func(msg string) map[string]any {
		return map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": msg, "exit_code": 1.0}}
	}
	// ns1:t2's regions, by name, and where the master has them.
	var t2 []string
	where := func() map[string]string {
		rs, err := cl.ListRegions(ctxT(t), "ns1:t2")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rs {
			out[r.GetName()] = r.GetServer()
		}
		return out
	}
	// created waits for a namespace created without --wait.
	created := func(ns string) {
		fc.WaitForNil("namespace "+ns, func() error { _, err := cl.GetNamespace(ctxT(t), ns); return err })
	}
	names := func(l []string) []any {
		out := []any{}
		for _, n := range l {
			out = append(out, n)
		}
		return out
	}
	// Region server id stops reaching the masters (its heartbeats and a
	// registration again are lost) until the test ends.
	cutOff := func(id string) {
		h := fc.Faults().MustAdd(rpcfault.Rule{Name: "cut " + id, Methods: []string{"/baton.rs.v1.Master/"}, Fault: rpcfault.DropRequest,
			When: func(c rpcfault.Call) bool {
				r, ok := c.Request.(interface{ GetServerId() string })
				return ok && r.GetServerId() == id
			}})
		t.Cleanup(h.Remove)
	}
	leaseOf := func(id string) string {
		srvs, err := cl.ListServers(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range srvs {
			if s.GetId() == id {
				return s.GetLeaseState()
			}
		}
		return ""
	}

	for _, tc := range []cliCase{
		// Namespaces.
		{name: "ns list", args: []string{"ns", "list", "--json"}, json: map[string]any{"namespaces": []any{"default"}}},
		{name: "ns create wait", args: []string{"ns", "create", "ns1", "--wait", "--json"}, json: succeeded},
		{name: "ns create again", args: []string{"ns", "create", "ns1", "--wait"}, code: 1, stdout: "procedure", stderr: `ended ROLLEDBACK (ALREADY_EXISTS): namespace ns1 exists`},
		{name: "ns create no wait", args: []string{"ns", "create", "ns2", "--json"}, json: started, absent: []string{"state", "procedure"}},
		{name: "ns create human", args: []string{"ns", "create", "ns3"}, stdout: "create namespace ns3: procedure"},
		// A name the masters would refuse is refused before it is sent
		// (TestRefusedBeforeSending has the rest).
		{name: "ns create invalid", args: []string{"ns", "create", "bad/name", "--json"}, code: 2, stderr: `namespace name "bad/name": character '/' not allowed`},
		{name: "ns create no name", args: []string{"ns", "create"}, code: 2, stderr: "want exactly one namespace NAME"},
		{name: "ns create two names", args: []string{"ns", "create", "a", "b"}, code: 2, stderr: "got 2 arguments"},
		{name: "ns delete unknown", args: []string{"ns", "delete", "ns9", "--wait", "--json"}, code: 1,
			json: map[string]any{"state": "ROLLEDBACK", "error": "namespace ns9 does not exist"}},
		{name: "ns delete", before: func() { created("ns3") }, args: []string{"ns", "delete", "ns3", "--wait"}, stdout: "delete namespace ns3: done"},
		{name: "ns list human", before: func() { created("ns2") }, args: []string{"ns", "list"}, stdout: "default\nns1\nns2\n"},
		{name: "ns list extra", args: []string{"ns", "list", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "ns unknown", args: []string{"ns", "frob"}, code: 2, stderr: "unknown command"},
		{name: "ns no command", args: []string{"ns"}, code: 2, stderr: "usage: baton ns"},
		{name: "ns help", args: []string{"ns", "-h"}, stdout: "usage: baton ns"},

		// Tables.
		{name: "table create", args: []string{"table", "create", "t1", "--regions", "4", "--wait", "--json"}, json: succeeded},
		{name: "table create exists", args: []string{"table", "create", "t1", "--wait", "--json"}, code: 1,
			json: map[string]any{"state": "ROLLEDBACK", "error": "table default:t1 exists", "proc_id": anID{}}},
		{name: "table create regions 0", args: []string{"table", "create", "t0", "--regions", "0"}, code: 2, stderr: fmt.Sprintf("--regions 0: want 1 to %d", client.MaxRegions)},
		{name: "table create regions too many", args: []string{"table", "create", "t0", "--regions", strconv.Itoa(client.MaxRegions + 1), "--json"}, code: 2, stderr: fmt.Sprintf("want 1 to %d", client.MaxRegions)},
		{name: "table create no name", args: []string{"table", "create", "--regions", "2"}, code: 2, stderr: "want exactly one table NAME"},
		{name: "table create empty name", args: []string{"table", "create", "ns1:"}, code: 2, stderr: "the name is empty"},
		{name: "table create namespace clash", args: []string{"table", "create", "ns1:t2", "--namespace", "ns2"}, code: 2, stderr: `--namespace says "ns2"`},
		{name: "table create qualified", args: []string{"table", "create", "ns1:t2", "--regions", "2", "--wait"}, stdout: "create table ns1:t2 (2 regions): done"},
		{name: "table create no namespace", args: []string{"table", "create", "t3", "--namespace", "nope", "--wait", "--json"}, code: 1,
			json: map[string]any{"state": "ROLLEDBACK", "error": "namespace nope does not exist (creating table nope:t3)"}},
		{name: "table create bad name", args: []string{"table", "create", "t/1"}, code: 2, stderr: "table name"},
		{name: "table describe", args: []string{"table", "describe", "t1", "--json"},
			json:  map[string]any{"namespace": "default", "name": "t1", "state": "ENABLED"},
			count: map[string]int{"regions": 4}},
		{name: "table describe region shape", args: []string{"table", "describe", "ns1:t2", "--json"},
			json: map[string]any{"regions": []any{
				map[string]any{"table": "ns1:t2", "state": "OPEN", "proc_id": 0.0},
				map[string]any{"table": "ns1:t2", "state": "OPEN", "proc_id": 0.0}}},
			then: func(t *testing.T, doc map[string]any, _ string) {
				// Names and servers as the master has them.
				at := where()
				for _, r := range doc["regions"].([]any) {
					r := r.(map[string]any)
					name, _ := r["name"].(string)
					if s, ok := at[name]; !ok || r["server"] != s || (s != "rs1" && s != "rs2") {
						t.Errorf("region %v, the master has %v", r, at)
					}
					t2 = append(t2, name)
				}
				slices.Sort(t2)
			}},
		{name: "table describe human", args: []string{"table", "describe", "t2", "--namespace", "ns1"}, stdout: "regions  2 (2 OPEN)"},
		{name: "table describe unknown", args: []string{"table", "describe", "nope", "--json"}, code: 1, json: notFound("table default:nope does not exist")},
		{name: "table describe unknown human", args: []string{"table", "describe", "nope"}, code: 1, stderr: "baton table list"},
		{name: "table list", args: []string{"table", "list", "--json"}, count: map[string]int{"tables": 2}},
		{name: "table list namespace", args: []string{"table", "list", "--namespace", "ns1"}, stdout: "ns1        t2    ENABLED"},
		{name: "table list empty", args: []string{"table", "list", "--namespace", "ns2", "--json"}, count: map[string]int{"tables": 0}},
		// The master lists no tables for a namespace that does not exist,
		// without an error.
		{name: "table list unknown namespace", args: []string{"table", "list", "--namespace", "nope"}, stdout: "no tables"},
		{name: "table delete enabled", args: []string{"table", "delete", "t1", "--wait"}, code: 1, stderr: "table default:t1 is ENABLED (want [DISABLED])"},
		{name: "table disable", args: []string{"table", "disable", "default:t1", "--wait", "--json"}, json: succeeded},
		{name: "table disabled regions", args: []string{"region", "list", "--table", "t1", "--json"},
			json: map[string]any{"regions": []any{map[string]any{"state": "CLOSED", "server": ""}, map[string]any{}, map[string]any{}, map[string]any{}}}},
		{name: "table enable", args: []string{"table", "enable", "t1", "--wait"}, stdout: "enable table default:t1: done"},
		{name: "table disable again", args: []string{"table", "disable", "t1", "--wait"}},
		{name: "table delete", args: []string{"table", "delete", "t1", "--wait", "--json"}, json: succeeded},
		{name: "table delete gone", args: []string{"table", "delete", "t1", "--wait"}, code: 1, stderr: "table default:t1 does not exist"},
		{name: "table unknown", args: []string{"table", "drop", "t1"}, code: 2, stderr: "unknown command"},

		// Regions.
		{name: "region list", args: []string{"region", "list", "--json"}, count: map[string]int{"regions": 2}},
		{name: "region list human", args: []string{"region", "list", "--table", "ns1:t2"}, stdout: "TABLE   REGION"},
		// As for tables: no regions for a table that does not exist.
		{name: "region list unknown table", args: []string{"region", "list", "--table", "nope", "--json"}, count: map[string]int{"regions": 0}},
		{name: "region move unknown server", argf: func() []string { return []string{"region", "move", t2[0], "--to", "rs9"} }, code: 1, stderr: "baton rs list"},
		{name: "region move unknown region", args: []string{"region", "move", "x", "--to", "rs2", "--json"}, code: 1, json: notFound(`region "x" does not exist`)},
		{name: "region move to a suspect", before: func() {
			fc.StartRegionServer("rs3")
			// Registered first: cut off before its registration lands (a
			// loaded machine), it would never be listed, let alone suspect.
			fc.WaitFor("rs3 registered", func() bool { return leaseOf("rs3") != "" })
			cutOff("rs3")
			fc.WaitFor("rs3 suspect", func() bool { return leaseOf("rs3") == "suspect" })
		},
			// The master takes the target as a preference: the move
			// succeeds, onto a live server.
			argf: func() []string { return []string{"region", "move", t2[0], "--to", "rs3", "--wait", "--json"} }, json: succeeded,
			then: func(t *testing.T, _ map[string]any, _ string) {
				if s := where()[t2[0]]; s != "rs1" && s != "rs2" {
					t.Errorf("%s on %q, want a live server", t2[0], s)
				}
			}},
		{name: "region move", argf: func() []string {
			// One not on rs2 yet, if the placement left one elsewhere.
			at := where()
			moved := t2[0]
			for _, n := range t2 {
				if at[n] != "rs2" {
					moved = n
				}
			}
			return []string{"region", "move", moved, "--to", "rs2", "--wait", "--json"}
		}, json: succeeded},
		{name: "region move no region", args: []string{"region", "move", "--to", "rs2"}, code: 2, stderr: "want exactly one REGION"},
		{name: "region moved", args: []string{"region", "list", "--json"},
			json: map[string]any{"regions": []any{map[string]any{"server": "rs2"}, map[string]any{"server": "rs2"}}}},

		// Region servers.
		{name: "rs list", args: []string{"rs", "list", "--json"}, count: map[string]int{"servers": 3},
			json: map[string]any{"servers": []any{
				map[string]any{"id": "rs1", "address": fc.RegionServers()["rs1"].Addr(), "lease_state": "live", "region_count": 0.0},
				map[string]any{"id": "rs2", "lease_state": "live", "region_count": 2.0},
				map[string]any{"id": "rs3", "lease_state": "suspect"}}}},
		{name: "rs list human", args: []string{"rs", "list"}, stdout: "LEASE    REGIONS  LAST RENEWAL"},
		{name: "rs regions", args: []string{"rs", "regions", "rs2", "--json"}, json: map[string]any{"server": "rs2"},
			then: func(t *testing.T, doc map[string]any, _ string) {
				if want := names(t2); !jsonHas(doc["hosted"], want) || !jsonHas(doc["assigned"], want) {
					t.Errorf("hosted %v, assigned %v, want %v", doc["hosted"], doc["assigned"], want)
				}
			}},
		{name: "rs regions none", args: []string{"rs", "regions", "rs1", "--json"}, json: map[string]any{"server": "rs1", "hosted": []any{}, "assigned": []any{}}},
		// rs2 closes a region on its own and its report is lost: the master
		// still assigns it there.
		{name: "rs regions differ", before: func() {
			h := fc.Faults().MustAdd(rpcfault.Rule{Name: "lost report", Methods: []string{"/baton.rs.v1.Master/ReportTransition"}, Fault: rpcfault.DropRequest,
				When: func(c rpcfault.Call) bool {
					r, ok := c.Request.(*rspb.ReportTransitionRequest)
					return ok && r.GetServerId() == "rs2" && r.GetRegion() == t2[0]
				}})
			t.Cleanup(h.Remove)
			if err := fc.RegionServers()["rs2"].CloseRegion(ctxT(t), t2[0]); err != nil {
				t.Fatal(err)
			}
			fc.WaitFor("the report lost", func() bool { return h.Fired() > 0 })
		},
			args: []string{"rs", "regions", "rs2"}, stdout: "the answers differ: 0 only hosted, 1 only assigned"},
		{name: "rs regions differ json", args: []string{"rs", "regions", "rs2", "--json"},
			then: func(t *testing.T, doc map[string]any, _ string) {
				if !jsonHas(doc["hosted"], names(t2[1:])) || !jsonHas(doc["assigned"], names(t2)) {
					t.Errorf("hosted %v, assigned %v; regions %v", doc["hosted"], doc["assigned"], t2)
				}
			}},
		// rs3, down, cannot answer the master.
		{name: "rs regions unreachable", before: func() { fc.StopRegionServer("rs3") },
			args: []string{"rs", "regions", "rs3"}, code: 1, stderr: "could not ask the region server"},
		{name: "rs regions unknown", args: []string{"rs", "regions", "rs9"}, code: 1, stderr: "baton rs list"},
		{name: "rs regions no server", args: []string{"rs", "regions"}, code: 2, stderr: "want exactly one region SERVER"},

		// Balance.
		{name: "balance", args: []string{"balance", "--wait", "--json"}, json: succeeded},
		{name: "balanced", args: []string{"rs", "list", "--json"},
			json: map[string]any{"servers": []any{map[string]any{"region_count": 1.0}, map[string]any{"region_count": 1.0}, map[string]any{"region_count": 0.0}}}},
		{name: "balance no wait", args: []string{"balance"}, stdout: "balance: procedure"},
		{name: "balance extra", args: []string{"balance", "now"}, code: 2, stderr: "takes no arguments"},
		{name: "balance help", args: []string{"balance", "-h"}, stdout: "usage: baton balance"},

		// The cluster unavailable.
		{name: "unavailable", args: []string{"table", "list", "--addr", clustertest.DeadAddr(t), "--timeout", "300ms", "--json"}, code: 3,
			json: map[string]any{"error": map[string]any{"code": "UNAVAILABLE", "exit_code": 3.0}}},
		{name: "unavailable human", args: []string{"table", "create", "t9", "--addr", clustertest.DeadAddr(t), "--timeout", "300ms"}, code: 3, stderr: "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, env) })
	}
}

// jumpClock is real time plus an offset the test moves forward at once:
// a lease runs out when the test says so, while the domain's timers (the
// lease monitor's passes, the dispatcher's delays) keep running in real
// time, which the region server that region locks need depends on.
type jumpClock struct{ off atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *jumpClock) AfterFunc(d time.Duration, f func()) clock.Timer { return time.AfterFunc(d, f) }

func (c *jumpClock) Jump(d time.Duration) { c.off.Add(int64(d)) }

// lockState is where lock id stands, read without renewing it as a
// heartbeat would: a lock is a procedure, which ends RELEASED or EXPIRED,
// and is "held" (acquired or waiting) until then.
func lockState(t *testing.T, cl *client.Client, id uint64) string {
	t.Helper()
	p, err := cl.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("lock %d: %v", id, err)
	}
	switch p.GetState() {
	case "SUCCESS", "FAILED", "ROLLEDBACK":
		return string(p.GetResult())
	}
	return "held"
}

func TestLockCommands(t *testing.T) {
	// A lease long enough that no lock runs out between two rows of a
	// loaded machine; the clock jumps past it when a row wants one gone.
	const lease = 30 * time.Second
	clk := &jumpClock{}
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1, Domain: func(_ int, d *domain.Config) {
		d.Clock = clk
		d.LockLease = lease
	}})
	cl := fc.Client()
	// Region locks name regions of an existing table.
	id, err := cl.CreateTable(ctxT(t), "", "regions", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(ctxT(t), id); err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("create: %v %v", p, err)
	}
	tb, err := cl.DescribeTable(ctxT(t), "", "regions")
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := tb.GetRegions()[0].GetName(), tb.GetRegions()[1].GetName()
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	var a, b string // lock ids, as the acquisitions print them
	lockID := func(doc map[string]any) string { return strconv.FormatFloat(doc["lock_id"].(float64), 'f', -1, 64) }
	idOf := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }
	for _, tc := range []struct {
		cliCase
		args func() []string // instead of cliCase.args, for ids known only then
		save *string         // where to keep the lock id printed
	}{
		{cliCase: cliCase{name: "no kind", args: []string{"lock", "acquire", "--name", "t"}, code: 2, stderr: "--kind is required"}},
		{cliCase: cliCase{name: "bad kind", args: []string{"lock", "acquire", "--kind", "row", "--name", "t"}, code: 2, stderr: `--kind "row": want one of namespace, table, region`}},
		{cliCase: cliCase{name: "no name", args: []string{"lock", "acquire", "--kind", "table"}, code: 2, stderr: "--name is required"}},
		{cliCase: cliCase{name: "two tables", args: []string{"lock", "acquire", "--kind", "table", "--name", "a", "--name", "b"}, code: 2, stderr: "takes one --name"}},
		{cliCase: cliCase{name: "positional", args: []string{"lock", "acquire", "--kind", "table", "t"}, code: 2, stderr: "takes no arguments"}},
		{cliCase: cliCase{name: "exclusive", args: []string{"lock", "acquire", "--kind", "table", "--name", "t", "--exclusive", "--json"},
			json: map[string]any{"id": anID{}, "lock_id": anID{}, "state": "ACQUIRED", "lease_timeout_ms": float64(defaultCLILockLease.Milliseconds())}}, save: &a},
		{cliCase: cliCase{name: "shared waits", args: []string{"lock", "acquire", "--kind", "TABLE", "--name", "default:t", "--holder", "me", "--json"},
			json: map[string]any{"state": "WAITING"}}, save: &b},
		{cliCase: cliCase{name: "waiting heartbeat", code: 0, stdout: "WAITING; lease renewed for 5s"}, args: func() []string { return []string{"lock", "heartbeat", b} }},
		// A lease of its own, rounded up to the master's next step.
		{cliCase: cliCase{name: "own lease", args: []string{"lock", "acquire", "--kind", "namespace", "--name", "leased", "--lease", "7s", "--json"},
			json: map[string]any{"state": "ACQUIRED", "lease_timeout_ms": float64(10_000)}}},
		{cliCase: cliCase{name: "lease too short", args: []string{"lock", "acquire", "--kind", "namespace", "--name", "leased", "--lease", "500ms"}, code: 2, stderr: "--lease 500ms: want between 1s and 1h"}},
		{cliCase: cliCase{name: "lease not a duration", args: []string{"lock", "acquire", "--kind", "namespace", "--name", "leased", "--lease", "soon"}, code: 2, stderr: `--lease "soon": want a duration`}},
		{cliCase: cliCase{name: "keepalive and command", args: []string{"lock", "acquire", "--kind", "table", "--name", "t", "--keepalive", "--", "true"}, code: 2, stderr: "give one"}},
		{cliCase: cliCase{name: "json and command", args: []string{"lock", "acquire", "--kind", "table", "--name", "t", "--json", "--", "true"}, code: 2, stderr: "the command's output is the output"}},
		{cliCase: cliCase{name: "nothing after --", args: []string{"lock", "acquire", "--kind", "table", "--name", "t", "--"}, code: 2, stderr: "nothing after --"}},
		{cliCase: cliCase{name: "region locks", args: []string{"lock", "acquire", "--kind", "region", "--name", r0, "--name", r1},
			stdout: "ACQUIRED: shared region lock on " + r0 + ", " + r1}},
		{cliCase: cliCase{name: "release", stdout: "RELEASED"}, args: func() []string { return []string{"lock", "release", a} }},
		{cliCase: cliCase{name: "release again", json: map[string]any{"state": "RELEASED"}}, args: func() []string { return []string{"lock", "release", a, "--json"} }},
		// The master grants the waiting lock once the first is gone.
		{cliCase: cliCase{name: "granted", json: map[string]any{"state": "ACQUIRED"}, before: func() {
			fc.WaitForNil("the shared lock granted", func() error {
				if r, err := cl.LockHeartbeat(ctxT(t), idOf(b)); err != nil || r.GetState() != client.LockAcquired {
					return fmt.Errorf("%v %v", r, err)
				}
				return nil
			})
		}}, args: func() []string { return []string{"lock", "heartbeat", b, "--json"} }},
		// Its lease runs out (the master ends the lock's procedure on its
		// own time).
		{cliCase: cliCase{name: "expired heartbeat", code: 1, json: map[string]any{"state": "EXPIRED"}, stderr: "its lease ran out",
			before: func() {
				clk.Jump(2 * lease)
				fc.WaitFor("the shared lock expired", func() bool { return lockState(t, cl, idOf(b)) == client.LockExpired })
			}},
			args: func() []string { return []string{"lock", "heartbeat", b, "--json"} }},
		{cliCase: cliCase{name: "expired release", code: 1, stdout: "EXPIRED", stderr: "EXPIRED"}, args: func() []string { return []string{"lock", "release", b} }},
		{cliCase: cliCase{name: "unknown lock", args: []string{"lock", "heartbeat", "999999", "--json"}, code: 1,
			json: map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": "procedure 999999 does not exist"}}}},
		{cliCase: cliCase{name: "unknown lock human", args: []string{"lock", "release", "999999"}, code: 1, stderr: "acquire a new one"}},
		{cliCase: cliCase{name: "bad id", args: []string{"lock", "release", "x"}, code: 2, stderr: "want a positive integer"}},
		{cliCase: cliCase{name: "no id", args: []string{"lock", "heartbeat"}, code: 2, stderr: "want exactly one lock ID"}},
		{cliCase: cliCase{name: "lock unknown", args: []string{"lock", "steal"}, code: 2, stderr: "unknown command"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cliCase
			if tc.args != nil {
				c.args = tc.args()
			}
			doc := c.check(t, env)
			if tc.save != nil {
				*tc.save = lockID(doc)
			}
		})
	}
}

// runInBackground runs a command in-process until it ends or the returned
// cancel (an interrupt) is called; the exit code arrives on the channel.
func runInBackground(env map[string]string, args ...string) (stdout, stderr *syncbuf.Buffer, cancel context.CancelFunc, done chan int) {
	return runInBackgroundWatching(env, nil, args...)
}

// runInBackgroundWatching is runInBackground with the cli's watching hook.
func runInBackgroundWatching(env map[string]string, watching func(uint64), args ...string) (stdout, stderr *syncbuf.Buffer, cancel context.CancelFunc, done chan int) {
	stdout, stderr = &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: func(k string) string { return env[k] }, watching: watching}
	done = make(chan int, 1)
	go func() { done <- c.run(args) }()
	return stdout, stderr, cancel, done
}

func exitOf(t *testing.T, done chan int) int {
	t.Helper()
	return within(t, done, 10*time.Second, "the command did not end")
}

// within is what done delivers within d; failing that, the test stops
// with failure (what did not happen in time).
func within[T any](t *testing.T, done <-chan T, d time.Duration, failure string) T {
	t.Helper()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

// TestLockKeepalive: --keepalive holds a lock across many leases, prints
// its one JSON document once the lock is acquired, and releases it when
// interrupted; it exits 1 when the lock is lost, and 3 when no heartbeat
// gets through for a whole lease.
//
// The masters measure leases on a Manual clock, moved only after the
// command has renewed its lock, so that a loaded machine delaying a
// heartbeat cannot expire it there. (Table and namespace locks only: a
// region lock needs a table, whose creation needs the domain's timers.)
// The command's own patience (a whole lease without a heartbeat getting
// through) is real time: the lease is long enough for a loaded machine,
// and the command heartbeats three times per lease.
func TestLockKeepalive(t *testing.T) {
	// The master's lease runs on the test's clock, but the command
	// counts its own in real time: it gives up on a lease no heartbeat
	// renewed within it. Three seconds keep a loaded machine's slow
	// heartbeat from ending the command, at three heartbeats a second
	// of the test. The commands ask for it with --lease (their own
	// default is longer).
	const lease = 3 * time.Second
	lockID := regexp.MustCompile(`lock (\d+) ACQUIRED`)
	start := func(t *testing.T, masters int, lease time.Duration) (*clustertest.Cluster, *clock.Manual) {
		clk := clock.NewManual(time.Unix(1_700_000_000, 0))
		fc := clustertest.New(t, clustertest.Config{Masters: masters, Domain: func(_ int, d *domain.Config) {
			d.Clock = clk
			d.LockLease = lease
		}})
		return fc, clk
	}
	// renewedAfter moves the lease clock on by step, then waits until a
	// heartbeat has renewed the command's lock at the new time. A call is
	// counted as it arrives, before its handler renews: the count passing
	// n+1 says the command sent another, which it does only once the one
	// before has been answered, so that one's renewal (at the new time,
	// as it arrived after the Advance) is done. Waiting for n+1 alone let
	// the next Advance overtake the renewal and expire the lock.
	renewedAfter := func(t *testing.T, heartbeats func() int, clk *clock.Manual, step time.Duration) {
		t.Helper()
		clk.Advance(step)
		n := heartbeats() // read after Advance: a later heartbeat renews at the new time
		testwait.For(t, 30*time.Second, "a heartbeat renewing at the new time", func() bool { return heartbeats() > n+1 })
	}

	t.Run("waits, holds, releases", func(t *testing.T) {
		fc, clk := start(t, 1, lease)
		cl := fc.Client()
		heartbeats := fc.CountCalls(lockHeartbeat)
		env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
		code, out, errs := runCLI(t, env, "lock", "acquire", "--kind", "namespace", "--name", "ns", "--exclusive", "--lease", lease.String(), "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var first lockJSON
		if err := json.Unmarshal([]byte(out), &first); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "namespace", "--name", "ns", "--keepalive", "--lease", lease.String(), "--json")
		defer interrupt()
		// Ours waits, renewing its request: nothing printed yet. The
		// master answers a parked acquisition as soon as the executor
		// parks it (a lock-wait listener), with its clock standing still:
		// no grace period has to run out.
		testwait.For(t, 30*time.Second, "the first heartbeat", func() bool { return heartbeats() > 0 })
		renewedAfter(t, heartbeats, clk, 0)
		if s := stdout.String(); s != "" {
			t.Fatalf("printed while waiting: %s", s)
		}
		// The first holder's lease runs out (nobody renews it), and ours,
		// renewed, is granted.
		step := lease * 3 / 4
		for i := 0; !strings.Contains(stdout.String(), "ACQUIRED"); i++ {
			if i == 4 {
				t.Fatalf("not granted 3 leases after the first holder's last heartbeat; stdout %q, first %s", stdout.String(), lockState(t, cl, first.LockID))
			}
			renewedAfter(t, heartbeats, clk, step)
		}
		var doc lockJSON
		if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
			t.Fatal(err)
		}
		if st := lockState(t, cl, first.LockID); st != client.LockExpired || doc.LockID == first.LockID {
			t.Fatalf("first %d %s, ours %+v", first.LockID, st, doc)
		}
		for range 6 { // held across several leases by the heartbeats
			renewedAfter(t, heartbeats, clk, step)
		}
		if st := lockState(t, cl, doc.LockID); st != "held" {
			t.Fatalf("after 4 leases: %s\nstderr: %s", st, stderr.String())
		}
		interrupt()
		if code := exitOf(t, done); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		// The release ends the lock's procedure on the master's own time.
		fc.WaitFor("our lock released", func() bool { return lockState(t, cl, doc.LockID) == client.LockReleased })
		dec := json.NewDecoder(strings.NewReader(stdout.String()))
		var v any
		_ = dec.Decode(&v)
		if dec.More() {
			t.Fatalf("more than one JSON document:\n%s", stdout.String())
		}
	})

	t.Run("lost", func(t *testing.T) {
		fc, _ := start(t, 1, lease)
		env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "t", "--keepalive")
		defer interrupt()
		fc.WaitFor("the lock", func() bool { return lockID.MatchString(stdout.String()) })
		id := lockID.FindStringSubmatch(stdout.String())[1]
		// Someone else releases it.
		if code, _, errs := runCLI(t, env, "lock", "release", id); code != 0 {
			t.Fatalf("release: %d %s", code, errs)
		}
		if code := exitOf(t, done); code != 1 {
			t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), "is RELEASED: it is no longer held") || !strings.Contains(stdout.String(), "RELEASED") {
			t.Fatalf("stdout: %s\nstderr: %s", stdout.String(), stderr.String())
		}
	})

	t.Run("cluster unavailable for a lease", func(t *testing.T) {
		fc, _ := start(t, 1, lease)
		env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "r", "--keepalive", "--lease", "1s")
		defer interrupt()
		fc.WaitFor("the lock", func() bool { return lockID.MatchString(stdout.String()) })
		// Every call refused from now on, as by a cluster without a leader.
		fc.Faults().MustAdd(rpcfault.Rule{Name: "outage", Methods: []string{"/baton.admin.v1.Admin/"}, Fault: rpcfault.DropRequest})
		if code := exitOf(t, done); code != 3 {
			t.Fatalf("exit %d, want 3\nstderr: %s", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "its whole lease: it has expired") {
			t.Fatalf("stderr: %s", stderr.String())
		}
	})

	t.Run("a failover shorter than the lease", func(t *testing.T) {
		// The outage below lasts about one heartbeat of the three per
		// lease and a leadership transfer; a loaded machine must not
		// stretch it to a whole lease.
		fc, _ := start(t, 2, 2*lease)
		li := fc.WaitLeaderKnown()
		env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}
		stdout, stderr, interrupt, done := runInBackground(env, "lock", "acquire", "--kind", "table", "--name", "r", "--keepalive", "--json")
		defer interrupt()
		fc.WaitFor("the lock", func() bool { return strings.Contains(stdout.String(), "ACQUIRED") })
		refused := fc.Faults().MustAdd(rpcfault.Rule{Name: "refused", Methods: []string{lockHeartbeat}, Fault: rpcfault.DropRequest, Times: 1})
		fc.WaitFor("a heartbeat refused", func() bool { return refused.Fired() > 0 })
		fc.TransferLeadership(1 - li)
		served := fc.CountCalls(lockHeartbeat) // from now on the new leader serves them
		fc.WaitFor("a heartbeat after the failover", func() bool { return served() > 0 })
		interrupt()
		if code := exitOf(t, done); code != 0 {
			t.Fatalf("exit %d, want 0\nstderr: %s", code, stderr.String())
		}
	})
}

const lockHeartbeat = "/baton.admin.v1.Admin/LockHeartbeat"
