package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
)

// TestList100kRegionsCommands lists 100,000 regions (seeded straight into
// the replicated state) with the CLI: --all prints every region exactly
// once, as a table and as one JSON document; without --all the first
// page comes with the way to the next on stderr.
func TestList100kRegionsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100,000 regions")
	}
	const tables, perTable = 10, 10_000
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	var names []string
	for i := range tables {
		names = append(names, c.SeedTable(fmt.Sprintf("default:t%02d", i), domain.TableEnabled, perTable, 3, func(i int) domain.Region {
			return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("x%02d", i%100)}
		})...)
	}
	addr := "--addr=" + c.AdminAddrs()[0]
	run := func(args ...string) (string, string) {
		t.Helper()
		// A page of 100,000 names under -race on a loaded machine can take
		// longer than the default 10 s to come back; what is tested is
		// what the pages hold, not how fast they come.
		code, stdout, stderr := runCLI(t, nil, append(args, addr, "--timeout=2m")...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		return stdout, stderr
	}
	// everyOnce checks that listed holds every seeded region once, in order.
	everyOnce := func(how string, listed []string) {
		t.Helper()
		if len(listed) != len(names) {
			t.Fatalf("%s: %d regions listed, want %d", how, len(listed), len(names))
		}
		for i, n := range listed {
			if n != names[i] {
				t.Fatalf("%s: region %d is %s, want %s", how, i, n, names[i])
			}
		}
	}

	stdout, _ := run("region", "list", "--all")
	var listed []string
	for i, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0:
			if len(f) < 2 || f[0] != "TABLE" || f[1] != "REGION" {
				t.Fatalf("header %q", line)
			}
		case len(f) == 5:
			listed = append(listed, f[1])
		case strings.HasPrefix(line, "("): // how the read was served
		default:
			t.Fatalf("line %d: %q", i, line)
		}
	}
	everyOnce("--all", listed)

	stdout, _ = run("region", "list", "--all", "--json")
	var doc struct {
		Regions []struct {
			Name   string `json:"name"`
			Server string `json:"server"`
		} `json:"regions"`
		Read *readJSON `json:"read"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("--all --json is not one document: %v\n%.500s", err, stdout)
	}
	listed = listed[:0]
	for _, r := range doc.Regions {
		listed = append(listed, r.Name)
	}
	everyOnce("--all --json", listed)
	if doc.Read == nil || doc.Read.ServedBy == "" {
		t.Errorf("--all --json: read %+v", doc.Read)
	}

	// The first page, and the way on.
	stdout, stderr := run("region", "list", "--json")
	var page struct {
		Regions       []regionJSON `json:"regions"`
		NextPageToken string       `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(stdout), &page); err != nil {
		t.Fatal(err)
	}
	tok := regexp.MustCompile(`--page-token (\S+)`).FindStringSubmatch(stderr)
	if len(page.Regions) != catalog.DefaultRegionPageSize || tok == nil || tok[1] != page.NextPageToken {
		t.Fatalf("first page: %d regions, token %q, stderr %q", len(page.Regions), page.NextPageToken, stderr)
	}
	stdout, _ = run("region", "list", "--page-token", tok[1], "--page-size", "2")
	if lines := strings.Split(stdout, "\n"); len(lines) < 3 || !strings.Contains(lines[1], names[catalog.DefaultRegionPageSize]+" ") ||
		!strings.Contains(lines[2], names[catalog.DefaultRegionPageSize+1]+" ") {
		t.Fatalf("second page, from the token:\n%.400s", stdout)
	}

	// Filtered by the masters: one server's regions, 1% of them.
	stdout, _ = run("region", "list", "--all", "--json", "--server", "x07", "--state", "open")
	doc.Regions = nil
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Regions) != len(names)/100 {
		t.Fatalf("--server x07: %d regions, want %d", len(doc.Regions), len(names)/100)
	}
	for _, r := range doc.Regions {
		if r.Server != "x07" {
			t.Fatalf("--server x07 listed %s on %s", r.Name, r.Server)
		}
	}

	stdout, _ = run("table", "list", "--all", "--json")
	var tdoc struct {
		Tables []tableJSON `json:"tables"`
	}
	if err := json.Unmarshal([]byte(stdout), &tdoc); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, tb := range tdoc.Tables {
		total += int(tb.RegionCount)
	}
	if len(tdoc.Tables) != tables || total != len(names) {
		t.Fatalf("table list --all: %d tables counting %d regions", len(tdoc.Tables), total)
	}
	stdout, stderr = run("table", "list", "--page-size", "3")
	if rows := strings.Count(stdout, "t0"); rows != 3 || !strings.Contains(stderr, "--page-token") || !strings.Contains(stdout, "10000 (10000 offline on a dead server)") {
		t.Fatalf("table list, pages of 3:\n%s\n%s", stdout, stderr)
	}

	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"region", "list", "--page-size", "20000"}, "--page-size 20000: want 1 to 10000"},
		{[]string{"region", "list", "--page-size", "-1"}, "--page-size -1"},
		{[]string{"region", "list", "--state", "ASLEEP"}, `unknown region state "ASLEEP"`},
		{[]string{"region", "list", "--page-token", "garbage"}, "bad page_token"},
		{[]string{"table", "list", "--state", "OPEN"}, `unknown table state "OPEN"`},
		{[]string{"rs", "list", "--page-size", "10001"}, "want 1 to 10000"},
	} {
		code, _, stderr := runCLI(t, nil, append(tc.args, addr)...)
		if code != exitUsage || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tc.args, code, exitUsage, tc.stderr, stderr)
		}
	}
}

// TestJSONArrayStream: the streamed document is one valid JSON document
// shaped as printJSON would print it, empty or not, ended by an error or
// not.
func TestJSONArrayStream(t *testing.T) {
	type item struct {
		Name string `json:"name"`
	}
	for _, tc := range []struct {
		name    string
		items   []item
		members []member
	}{
		{name: "empty", members: []member{{"read", map[string]string{"served_by": "m1"}}}},
		{name: "one", items: []item{{"a"}}},
		{name: "three and a nil member", items: []item{{"a"}, {"b"}, {"c"}}, members: []member{{"read", nil}, {"error", map[string]any{"message": "x"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			s := newJSONArrayStream(&b, "things")
			whole := map[string]any{"things": []item{}}
			for _, it := range tc.items {
				s.add(it)
			}
			if tc.items != nil {
				whole["things"] = tc.items
			}
			for _, m := range tc.members {
				if m.value != nil {
					whole[m.key] = m.value
				}
			}
			if err := s.end(tc.members...); err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, b.String())
			}
			wb, _ := json.Marshal(whole)
			_ = json.Unmarshal(wb, &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			if tc.items != nil && len(tc.members) == 0 {
				var indented bytes.Buffer
				_ = json.Indent(&indented, wb, "", "  ")
				if b.String() != indented.String()+"\n" {
					t.Errorf("indented as\n%s\nnot as printJSON would:\n%s", b.String(), indented.String())
				}
			}
		})
	}
	var failing failingWriter
	s := newJSONArrayStream(&failing, "things")
	s.add(item{"a"})
	if err := s.end(); err == nil {
		t.Fatal("a failed write went unreported")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestColumnsKeepTheFirstPageWidths: later pages line up with the first.
func TestColumnsKeepTheFirstPageWidths(t *testing.T) {
	var b bytes.Buffer
	c := &columns{w: &b}
	c.print([][]string{{"NAME", "STATE"}, {"a", "OPEN"}})
	c.print([][]string{{"bb", "CLOSED"}, {"a-much-longer-name", "OPEN"}})
	want := "NAME  STATE\na     OPEN\nbb    CLOSED\na-much-longer-name  OPEN\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestWalkPagesFailingMidway: a walk whose second page fails has printed
// one valid JSON document, ended by the error, and exits as the failed
// read would; one whose first page fails prints the usual error document.
func TestWalkPagesFailingMidway(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAt    int
		wantItems int
	}{
		{name: "second page", failAt: 1, wantItems: 2},
		{name: "first page", failAt: 0, wantItems: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			c := &cli{ctx: t.Context(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			e := c.command("region list", "", regionAdvice)
			e.cf.json = true
			calls := 0
			fetch := func(string) ([]string, string, error) {
				calls++
				if calls > tc.failAt {
					return nil, "", status.Error(codes.Unavailable, "no leader")
				}
				return []string{"a", "b"}, "next", nil
			}
			code := walkPages(e, "regions", "", fetch, func(s string) any { return s }, nil,
				func(int) []member { t.Fatal("a failed walk was ended as a whole one"); return nil })
			if code != exitUnavailable || !strings.Contains(errb.String(), "no leader") {
				t.Fatalf("exit %d, stderr %q", code, errb.String())
			}
			var doc struct {
				Regions []string `json:"regions"`
				Error   struct {
					Code     string `json:"code"`
					ExitCode int    `json:"exit_code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatalf("not one document: %v\n%s", err, out.String())
			}
			if len(doc.Regions) != tc.wantItems || doc.Error.Code != "UNAVAILABLE" || doc.Error.ExitCode != exitUnavailable {
				t.Fatalf("document %+v", doc)
			}
		})
	}
}
