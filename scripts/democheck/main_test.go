package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fixture is a cluster's answers, as the demo scripts collect them.
type fixture struct {
	regions []regionJSON
	servers []string
	hosted  map[string][]any // server -> hosted entries (names or objects)
	tables  any              // the tables.json document
	skip    map[string]bool  // servers whose hosted file is absent
}

// healthy: 2 tables x 3 regions, spread over rs1..rs3, all open once.
func healthy() fixture {
	f := fixture{servers: []string{"rs1", "rs2", "rs3"}, hosted: map[string][]any{}, skip: map[string]bool{},
		tables: map[string]any{"tables": []any{map[string]string{"name": "demo1", "state": "ENABLED"}, "demo2"}}}
	for _, t := range []string{"demo1", "demo2"} {
		for i := range 3 {
			srv := f.servers[i]
			name := fmt.Sprintf("%s,r%d", t, i)
			f.regions = append(f.regions, regionJSON{Name: name, Table: t, State: "OPEN", Server: srv})
			f.hosted[srv] = append(f.hosted[srv], name)
		}
	}
	return f
}

func (f fixture) write(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	put := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("regions.json", map[string]any{"regions": f.regions})
	var srvs []serverJSON
	for _, s := range f.servers {
		srvs = append(srvs, serverJSON{ID: s, LeaseState: "live", RegionCount: len(f.hosted[s])})
	}
	put("servers.json", map[string]any{"servers": srvs})
	put("tables.json", f.tables)
	for _, s := range f.servers {
		if f.skip[s] {
			continue
		}
		var assigned []string
		for _, g := range f.regions {
			if g.Server == s {
				assigned = append(assigned, g.Name)
			}
		}
		hosted := f.hosted[s]
		if hosted == nil {
			hosted = []any{}
		}
		put("hosted-"+s+".json", map[string]any{"server": s, "hosted": hosted, "assigned": assigned})
	}
	return dir
}

func TestVerify(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*fixture)
		code   int
		want   string // in the report
	}{
		{"healthy", func(*fixture) {}, exitOK, "every region is OPEN on exactly one region server"},
		{"hosted as objects", func(f *fixture) {
			for s, hs := range f.hosted {
				var objs []any
				for _, h := range hs {
					objs = append(objs, map[string]string{"name": h.(string), "state": "OPEN"})
				}
				f.hosted[s] = objs
			}
		}, exitOK, "rs1 2, rs2 2, rs3 2"},
		{"server recorded with a start code", func(f *fixture) {
			for i := range f.regions {
				f.regions[i].Server += ",1712345678"
			}
		}, exitOK, "no region is missing"},
		{"open twice", func(f *fixture) {
			f.hosted["rs2"] = append(f.hosted["rs2"], "demo1,r0")
		}, exitUnsafe, "regions OPEN on more than one server: demo1,r0 on rs1+rs2"},
		{"stray open twice", func(f *fixture) {
			f.hosted["rs1"] = append(f.hosted["rs1"], "gone,r9")
			f.hosted["rs3"] = append(f.hosted["rs3"], "gone,r9")
		}, exitUnsafe, "gone,r9 on rs1+rs3"},
		{"missing", func(f *fixture) {
			f.hosted["rs3"] = f.hosted["rs3"][:1]
		}, exitNotYet, "regions open on no server: demo2,r2"},
		{"misplaced", func(f *fixture) {
			f.hosted["rs3"] = f.hosted["rs3"][:1]
			f.hosted["rs1"] = append(f.hosted["rs1"], "demo2,r2")
		}, exitNotYet, "demo2,r2 on rs1, masters say rs3"},
		{"stray", func(f *fixture) {
			f.hosted["rs2"] = append(f.hosted["rs2"], "gone,r1")
		}, exitNotYet, "regions open that the masters do not know"},
		{"in transition", func(f *fixture) {
			f.hosted["rs1"] = []any{map[string]string{"name": "demo1,r0", "state": "OPENING"}, "demo2,r0"}
		}, exitNotYet, "rs1 reports 1 region in transition: demo1,r0(OPENING)"},
		{"masters say not open", func(f *fixture) {
			f.regions[0].State = "OPENING"
		}, exitNotYet, "masters record 1 region not OPEN on a server"},
		{"table short of regions", func(f *fixture) {
			f.regions = f.regions[1:]
			f.hosted["rs1"] = f.hosted["rs1"][1:]
		}, exitNotYet, "demo1 has 2"},
		{"table not listed", func(f *fixture) {
			f.tables = map[string]any{"tables": []any{"demo1"}}
		}, exitNotYet, "tables missing from the table list: demo2"},
		{"namespaced names", func(f *fixture) {
			f.tables = map[string]any{"tables": []any{map[string]string{"namespace": "default", "name": "demo1"}, "default:demo2"}}
			for i := range f.regions {
				f.regions[i].Table = "default:" + f.regions[i].Table
			}
		}, exitOK, "all 2 tables listed"},
		{"another namespace is another table", func(f *fixture) {
			f.tables = map[string]any{"tables": []any{map[string]string{"namespace": "ns1", "name": "demo1"}, "demo2"}}
		}, exitNotYet, "tables missing from the table list: demo1"},
		{"server did not answer", func(f *fixture) {
			f.skip["rs2"] = true
		}, exitNotYet, "rs2: no answer to `rs regions`"},
		{"server not registered", func(f *fixture) {
			f.servers = f.servers[:2]
		}, exitNotYet, "region servers not registered: rs3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := healthy()
			c.mutate(&f)
			dir := f.write(t)
			var out, errOut bytes.Buffer
			code := run([]string{"verify", "--dir", dir, "--tables", "demo1,demo2", "--regions-per-table", "3", "--servers", "rs1,rs2,rs3"},
				nil, &out, &errOut)
			if code != c.code || !strings.Contains(out.String(), c.want) {
				t.Fatalf("exit %d (want %d); want %q in:\n%s%s", code, c.code, c.want, out.String(), errOut.String())
			}
		})
	}
}

func TestVerifyUnreadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "regions.json"), []byte("Error: no leader\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"verify", "--dir", dir, "--tables", "a", "--regions-per-table", "1"}, nil, &out, &errOut); code != exitUsage {
		t.Fatalf("exit %d, want %d; %s", code, exitUsage, errOut.String())
	}
	if !strings.Contains(errOut.String(), "regions.json") {
		t.Fatalf("the error should name the file: %s", errOut.String())
	}
}

func TestStdinCommands(t *testing.T) {
	cases := []struct {
		args []string
		in   string
		code int
		out  string
	}{
		{[]string{"leader"}, `{"node_id":"n2","leader_id":"n1"}`, exitOK, "n1\n"},
		{[]string{"leader", "--not", "n1"}, `{"leader_id":"n1"}`, exitNotYet, ""},
		{[]string{"leader", "--not", "n1"}, `{"leader_id":"n3"}`, exitOK, "n3\n"},
		{[]string{"leader"}, `{"leader_id":""}`, exitNotYet, ""},
		{[]string{"leader"}, ``, exitUsage, ""},
		{[]string{"voter", "--id", "m-3"}, `{"leader_id":"m-0","peers":[{"id":"m-0","suffrage":"Voter"},{"id":"m-3","suffrage":"Voter"}]}`, exitOK, "Voter\n"},
		{[]string{"voter", "--id", "m-3"}, `{"leader_id":"m-0","peers":[{"id":"m-3","suffrage":"Nonvoter"}]}`, exitNotYet, "Nonvoter\n"},
		{[]string{"voter", "--id", "m-3"}, `{"leader_id":"m-0","peers":[{"id":"m-0","suffrage":"Voter"}]}`, exitNotYet, "not a member\n"},
		{[]string{"servers"}, `{"servers":[{"id":"rs1","lease_state":"live","region_count":3},{"id":"rs2"}]}`, exitOK, "rs1\nrs2\n"},
		{[]string{"unfinished"}, `{"procedures":[{"id":1,"state":"SUCCESS"},{"id":2,"state":"RUNNABLE"},{"id":3,"parent_id":2,"state":"WAITING"},{"id":4,"state":"WAITING"},{"id":5,"state":"ROLLEDBACK"}]}`, exitOK, "2\n4\n"},
		// halfdone: unfinished roots with enough writes, all by the leader.
		{[]string{"halfdone", "--leader", "n1", "--min-writes", "3"}, `{"procedures":[
			{"id":1,"type":"sleep","state":"RUNNABLE","runs":[{"node":"n1","last_write":5}]},
			{"id":2,"type":"sleep","state":"RUNNABLE","runs":[{"node":"n1","last_write":2}]},
			{"id":3,"type":"sleep","state":"SUCCESS","runs":[{"node":"n1","last_write":9}]},
			{"id":4,"type":"sleep","state":"RUNNABLE","runs":[{"node":"n2","last_write":9}]},
			{"id":5,"parent_id":1,"type":"sleep","state":"RUNNABLE","runs":[{"node":"n1","last_write":9}]}]}`, exitOK, "1 sleep RUNNABLE n1 writes 1-5\n"},
		{[]string{"halfdone", "--leader", "n1"}, `{"procedures":[{"id":3,"state":"SUCCESS","runs":[{"node":"n1","last_write":9}]}]}`, exitNotYet, ""},
		{[]string{"halfdone"}, `{"procedures":[]}`, exitUsage, ""},
		// resumed: roots both leaders wrote, table creates first.
		{[]string{"resumed", "--killed", "n1", "--new", "n2"}, `{"procedures":[
			{"id":1,"type":"sleep","state":"SUCCESS","runs":[{"node":"n1","last_write":4},{"node":"n2","first_write":5,"last_write":41}]},
			{"id":2,"type":"CreateTable","state":"SUCCESS","runs":[{"node":"n1","last_write":3},{"node":"n2","first_write":4,"last_write":6}]},
			{"id":3,"type":"CreateTable","state":"SUCCESS","runs":[{"node":"n2","last_write":6}]},
			{"id":4,"type":"CreateTable","state":"SUCCESS","runs":[{"node":"n1","last_write":6}]},
			{"id":5,"type":"CreateTable","state":"SUCCESS","runs":[{"node":"n1","last_write":2},{"node":"n3","first_write":3,"last_write":6}]}]}`, exitOK,
			"2 CreateTable SUCCESS n1 writes 1-3, n2 writes 4-6\n1 sleep SUCCESS n1 writes 1-4, n2 writes 5-41\n"},
		{[]string{"resumed", "--killed", "n1", "--new", "n2"}, `{"procedures":[{"id":4,"type":"CreateTable","state":"SUCCESS","runs":[{"node":"n1","last_write":6}]}]}`, exitNotYet, ""},
		{[]string{"midway", "--want", "4"}, `{"regions":[{"name":"a","state":"OPEN"},{"name":"b","state":"OPENING"}]}`, exitOK, "1/4 regions OPEN (2 known: 1 OPEN, 1 OPENING)\n"},
		{[]string{"midway", "--want", "2"}, `{"regions":[{"name":"a","state":"OPENING"}]}`, exitNotYet, "0/2 regions OPEN (1 known: 1 OPENING)\n"},
		{[]string{"midway", "--want", "2"}, `{"regions":[]}`, exitNotYet, "0/2 regions OPEN (0 known: -)\n"},
		{[]string{"midway", "--want", "1"}, `{"regions":[{"name":"a","state":"OPEN"}]}`, exitTooLate, "1/1 regions OPEN (1 known: 1 OPEN)\n"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(c.args, strings.NewReader(c.in), &out, &errOut)
		if code != c.code || out.String() != c.out {
			t.Errorf("%v < %s: exit %d output %q (stderr %q), want exit %d output %q", c.args, c.in, code, out.String(), errOut.String(), c.code, c.out)
		}
	}
}

func TestReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "not ready: no leader known", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready: leader\n"))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := run([]string{"ready", "--timeout", "10s", srv.URL + "/readyz"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "ready: leader") {
		t.Fatalf("output %q", out.String())
	}
	srv.Close()
	errOut.Reset()
	if code := run([]string{"ready", "--timeout", "300ms", srv.URL + "/readyz"}, nil, &out, &errOut); code == exitOK {
		t.Fatal("a closed server was ready")
	}
	if !strings.Contains(errOut.String(), "not ready after") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// newleader hears the first master that calls itself leader (not the
// killed one), while another node does not answer at all.
func TestNewLeader(t *testing.T) {
	var calls atomic.Int32
	status := func(id, state string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"id":%q,"state":%q}`, id, state)
		}
	}
	old := httptest.NewServer(status("n1", "Leader")) // the killed one, as a stale answer
	defer old.Close()
	dead := httptest.NewServer(nil)
	dead.Close()
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			status("n2", "Candidate")(w, r)
			return
		}
		status("n2", "Leader")(w, r)
	}))
	defer next.Close()
	since := time.Now().Add(-time.Second)
	var out, errOut bytes.Buffer
	code := run([]string{"newleader", "--not", "n1", "--since-ms", fmt.Sprint(since.UnixMilli()), "--timeout", "20s",
		old.URL + "/status", dead.URL + "/status", next.URL + "/status"}, nil, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var id string
	var ms int64
	if _, err := fmt.Sscanf(out.String(), "%s %d", &id, &ms); err != nil || id != "n2" || ms < 1000 {
		t.Fatalf("output %q: want n2 and at least 1000 ms since the kill", out.String())
	}
	out.Reset()
	errOut.Reset()
	code = run([]string{"newleader", "--not", "n1", "--since-ms", fmt.Sprint(since.UnixMilli()), "--timeout", "300ms", old.URL + "/status", dead.URL + "/status"}, nil, &out, &errOut)
	if code != exitNotYet || !strings.Contains(errOut.String(), "no master but n1 reported itself leader") {
		t.Fatalf("exit %d, stderr %q: want exit %d and the reason", code, errOut.String(), exitNotYet)
	}
}
