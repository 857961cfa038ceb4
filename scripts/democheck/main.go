// Command democheck reads the --json output of Baton's client commands for
// the demo scripts (scripts/demo-failover.sh, scripts/demo-local.sh), so
// that they need neither jq nor python: only Go, which builds the node
// binary anyway.
//
//	democheck leader [--not ID]      < cluster-status.json  the leader's id (exit 1: none, or still ID)
//	democheck voter --id ID          < cluster-status.json  ID's suffrage; exit 0 once it is a Voter under a leader
//	democheck servers                < rs-list.json         the region servers' ids, one per line
//	democheck unfinished             < proc-list.json       ids of root procedures not yet terminal
//	democheck halfdone --leader ID [--min-writes N] < proc-list.json
//	                                 root procedures not terminal whose N or more writes were all made by
//	                                 ID, one per line (exit 1: none)
//	democheck resumed --killed ID --new ID < proc-list.json
//	                                 root procedures with writes by both (their runs), table creates
//	                                 first, one per line: "ID TYPE STATE RUNS" (exit 1: none)
//	democheck newleader --not ID --since-ms T [--timeout D] URL...
//	                                 poll the masters' /status URLs until one reports itself leader and
//	                                 is not ID; print "ID MS", MS the milliseconds since the Unix time T
//	democheck midway --want N        < region-list.json     "k/N regions OPEN ..."; exit 0 if 0 < k < N,
//	                                                        1 if k == 0, 2 if k >= N
//	democheck ready --timeout D URL...                     wait until every URL answers 200
//	democheck verify --dir DIR --tables T1,T2 --regions-per-table N [--servers rs1,rs2]
//
// verify is the demo's verdict. DIR holds regions.json (`baton region list
// --json`: the masters' view), servers.json (`baton rs list --json`),
// tables.json (`baton table list --json`) and hosted-SERVER.json for every
// server (`baton rs regions SERVER --json`: the region server's own answer
// under "hosted"; the masters' view under "assigned"). It checks that every
// expected table is listed with exactly N regions, that the masters record
// every region OPEN on a server, and, from the servers' own answers, that
// every region is open on exactly one server, the one the masters record,
// and that no server hosts a region the masters do not know. Exit codes: 0
// all checks pass; 1 a check failed that time may still fix (a region not
// open yet, a server that did not answer); 4 a safety violation no
// waiting can excuse (a region open on two servers at once).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/security"
)

// Exit codes.
const (
	exitOK      = 0
	exitNotYet  = 1 // a check failed that time may fix; leader: none yet; midway: no region open yet
	exitTooLate = 2 // midway: every region is open already
	exitUsage   = 3 // bad arguments or unreadable input
	exitUnsafe  = 4 // verify: a region is open on two servers
)

// States as the API spells them.
const (
	stateOpen    = "OPEN"
	stateSuccess = "SUCCESS"
	stateRolled  = "ROLLEDBACK"
)

// sameServer reports whether the masters' record of a region's server
// (which may carry a start code: "rs1,1712345678") names server id.
func sameServer(recorded, id string) bool {
	if recorded == id {
		return true
	}
	rest, ok := strings.CutPrefix(recorded, id)
	return ok && rest != "" && strings.ContainsRune(",@:/ ", rune(rest[0]))
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: democheck leader|voter|servers|unfinished|halfdone|resumed|newleader|midway|ready|verify ... (see go doc ./scripts/democheck)")
		return exitUsage
	}
	fs := flag.NewFlagSet("democheck "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var err error
	code := exitOK
	switch args[0] {
	case "leader":
		not := fs.String("not", "", "fail while the leader is still this id (the one just killed)")
		if err = fs.Parse(args[1:]); err == nil {
			code, err = leader(stdin, stdout, *not)
		}
	case "voter":
		id := fs.String("id", "", "the member that must be a voter")
		if err = fs.Parse(args[1:]); err == nil {
			code, err = voter(stdin, stdout, *id)
		}
	case "servers":
		if err = fs.Parse(args[1:]); err == nil {
			err = servers(stdin, stdout)
		}
	case "unfinished":
		if err = fs.Parse(args[1:]); err == nil {
			err = unfinished(stdin, stdout)
		}
	case "halfdone":
		ldr := fs.String("leader", "", "the leader about to be killed")
		minWrites := fs.Uint("min-writes", 2, "writes a procedure must have persisted (1 is its submission)")
		if err = fs.Parse(args[1:]); err == nil {
			if *ldr == "" {
				fmt.Fprintln(stderr, "democheck halfdone: --leader is required")
				return exitUsage
			}
			code, err = halfdone(stdin, stdout, *ldr, uint32(*minWrites))
		}
	case "resumed":
		killed := fs.String("killed", "", "the leader that was killed")
		newLeader := fs.String("new", "", "the leader that took over")
		if err = fs.Parse(args[1:]); err == nil {
			if *killed == "" || *newLeader == "" {
				fmt.Fprintln(stderr, "democheck resumed: --killed and --new are required")
				return exitUsage
			}
			code, err = resumed(stdin, stdout, *killed, *newLeader)
		}
	case "newleader":
		not := fs.String("not", "", "the leader that was killed")
		since := fs.Int64("since-ms", 0, "Unix time in milliseconds of the kill")
		timeout := fs.Duration("timeout", time.Minute, "give up after this long")
		if err = fs.Parse(args[1:]); err == nil {
			if *since <= 0 || fs.NArg() == 0 {
				fmt.Fprintln(stderr, "democheck newleader: --since-ms and the masters' /status URLs are required")
				return exitUsage
			}
			code, err = newLeader(fs.Args(), *not, time.UnixMilli(*since), *timeout, stdout)
		}
	case "midway":
		want := fs.Int("want", 0, "how many regions the demo's tables have in all")
		if err = fs.Parse(args[1:]); err == nil {
			code, err = midway(stdin, stdout, *want)
		}
	case "ready":
		timeout := fs.Duration("timeout", time.Minute, "give up after this long")
		if err = fs.Parse(args[1:]); err == nil {
			err = ready(fs.Args(), *timeout, stdout)
		}
	case "verify":
		dir := fs.String("dir", "", "directory of the collected JSON answers")
		tables := fs.String("tables", "", "the demo's tables, comma-separated")
		per := fs.Int("regions-per-table", 0, "regions each table must have")
		srvs := fs.String("servers", "", "region servers that must be registered, comma-separated (optional)")
		if err = fs.Parse(args[1:]); err == nil {
			if *dir == "" || *tables == "" || *per <= 0 {
				fmt.Fprintln(stderr, "democheck verify: --dir, --tables and --regions-per-table are required")
				return exitUsage
			}
			var r report
			r, err = verify(*dir, splitList(*tables), *per, splitList(*srvs))
			if err == nil {
				r.print(stdout)
				code = r.code()
			}
		}
	default:
		fmt.Fprintf(stderr, "democheck: unknown command %q\n", args[0])
		return exitUsage
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "democheck %s: %v\n", args[0], err)
		if code == exitOK {
			code = exitUsage
		}
	}
	return code
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func decode(r io.Reader, v any) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return errors.New("empty input (the command printed no JSON)")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("not the expected JSON: %w", err)
	}
	return nil
}

func decodeFile(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := decode(f, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// leader prints the leader_id of a `baton cluster status --json` document.
func leader(r io.Reader, w io.Writer, not string) (int, error) {
	var s struct {
		LeaderID string `json:"leader_id"`
	}
	if err := decode(r, &s); err != nil {
		return exitUsage, err
	}
	if s.LeaderID == "" || s.LeaderID == not {
		return exitNotYet, nil
	}
	fmt.Fprintln(w, s.LeaderID)
	return exitOK, nil
}

// voter reads `cluster status --json` and succeeds once member id is a
// voter of a cluster with a leader, printing the member's suffrage
// otherwise (a scale-up's member joins as a non-voter first).
func voter(r io.Reader, w io.Writer, id string) (int, error) {
	var s struct {
		LeaderID string `json:"leader_id"`
		Peers    []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
		} `json:"peers"`
	}
	if err := decode(r, &s); err != nil {
		return exitUsage, err
	}
	for _, p := range s.Peers {
		if p.ID == id {
			fmt.Fprintln(w, p.Suffrage)
			if p.Suffrage == "Voter" && s.LeaderID != "" {
				return exitOK, nil
			}
			return exitNotYet, nil
		}
	}
	fmt.Fprintln(w, "not a member")
	return exitNotYet, nil
}

type serverJSON struct {
	ID          string `json:"id"`
	LeaseState  string `json:"lease_state"`
	RegionCount int    `json:"region_count"`
}

func servers(r io.Reader, w io.Writer) error {
	var doc struct {
		Servers []serverJSON `json:"servers"`
	}
	if err := decode(r, &doc); err != nil {
		return err
	}
	for _, s := range doc.Servers {
		fmt.Fprintln(w, s.ID)
	}
	return nil
}

func unfinished(r io.Reader, w io.Writer) error {
	var doc struct {
		Procedures []struct {
			ID       uint64 `json:"id"`
			ParentID uint64 `json:"parent_id"`
			State    string `json:"state"`
		} `json:"procedures"`
	}
	if err := decode(r, &doc); err != nil {
		return err
	}
	for _, p := range doc.Procedures {
		if p.ParentID == 0 && p.State != stateSuccess && p.State != stateRolled {
			fmt.Fprintln(w, p.ID)
		}
	}
	return nil
}

// procRuns is a procedure of `baton proc list --json` with its runs.
type procRuns struct {
	ID       uint64    `json:"id"`
	ParentID uint64    `json:"parent_id"`
	Type     string    `json:"type"`
	State    string    `json:"state"`
	Runs     []runJSON `json:"runs"`
}

type runJSON struct {
	Node       string `json:"node"`
	FirstWrite uint32 `json:"first_write"`
	LastWrite  uint32 `json:"last_write"`
}

func (p procRuns) terminal() bool { return p.State == stateSuccess || p.State == stateRolled }

// writes is the number of the procedure's last persisted write.
func (p procRuns) writes() uint32 {
	if len(p.Runs) == 0 {
		return 0
	}
	return p.Runs[len(p.Runs)-1].LastWrite
}

func (p procRuns) ranOn(node string) bool {
	return slices.ContainsFunc(p.Runs, func(r runJSON) bool { return r.Node == node })
}

// runsText is "n1 writes 1-7, n2 writes 8-41".
func (p procRuns) runsText() string {
	var parts []string
	for _, r := range p.Runs {
		first := max(r.FirstWrite, 1) // a stored record leaves out a first write of 1
		if r.LastWrite > first {
			parts = append(parts, fmt.Sprintf("%s writes %d-%d", r.Node, first, r.LastWrite))
		} else {
			parts = append(parts, fmt.Sprintf("%s write %d", r.Node, r.LastWrite))
		}
	}
	return orDash(strings.Join(parts, ", "))
}

func rootProcs(r io.Reader) ([]procRuns, error) {
	var doc struct {
		Procedures []procRuns `json:"procedures"`
	}
	if err := decode(r, &doc); err != nil {
		return nil, err
	}
	var out []procRuns
	for _, p := range doc.Procedures {
		if p.ParentID == 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

// halfdone lists the root procedures a kill of leader would catch half
// done: not finished, with minWrites or more writes, all of them leader's
// (so that what follows the kill is certainly another master's work).
func halfdone(r io.Reader, w io.Writer, leader string, minWrites uint32) (int, error) {
	procs, err := rootProcs(r)
	if err != nil {
		return exitUsage, err
	}
	n := 0
	for _, p := range procs {
		if p.terminal() || p.writes() < minWrites || len(p.Runs) != 1 || p.Runs[0].Node != leader {
			continue
		}
		fmt.Fprintf(w, "%d %s %s %s\n", p.ID, p.Type, p.State, p.runsText())
		n++
	}
	if n == 0 {
		return exitNotYet, nil
	}
	return exitOK, nil
}

// resumed lists the root procedures both leaders wrote: the killed one
// before its death, the new one after. Table creates come first (the
// demo's subject), then by id.
func resumed(r io.Reader, w io.Writer, killed, newLeader string) (int, error) {
	procs, err := rootProcs(r)
	if err != nil {
		return exitUsage, err
	}
	var both []procRuns
	for _, p := range procs {
		if p.ranOn(killed) && p.ranOn(newLeader) {
			both = append(both, p)
		}
	}
	sort.SliceStable(both, func(i, j int) bool {
		ti, tj := isTableProc(both[i].Type), isTableProc(both[j].Type)
		if ti != tj {
			return ti
		}
		return both[i].ID < both[j].ID
	})
	for _, p := range both {
		fmt.Fprintf(w, "%d %s %s %s\n", p.ID, p.Type, p.State, p.runsText())
	}
	if len(both) == 0 {
		return exitNotYet, nil
	}
	return exitOK, nil
}

// isTableProc: CreateTable and the like, the demo's subject.
func isTableProc(typ string) bool { return strings.Contains(strings.ToLower(typ), "table") }

type regionJSON struct {
	Name   string `json:"name"`
	Table  string `json:"table"`
	State  string `json:"state"`
	Server string `json:"server"`
}

func midway(r io.Reader, w io.Writer, want int) (int, error) {
	if want <= 0 {
		return exitUsage, errors.New("--want must be positive")
	}
	var doc struct {
		Regions []regionJSON `json:"regions"`
	}
	if err := decode(r, &doc); err != nil {
		return exitUsage, err
	}
	by := map[string]int{}
	for _, g := range doc.Regions {
		by[g.State]++
	}
	var states []string
	for st := range by {
		states = append(states, st)
	}
	sort.Strings(states)
	var parts []string
	for _, st := range states {
		parts = append(parts, fmt.Sprintf("%d %s", by[st], st))
	}
	open := by[stateOpen]
	fmt.Fprintf(w, "%d/%d regions OPEN (%d known: %s)\n", open, want, len(doc.Regions), orDash(strings.Join(parts, ", ")))
	switch {
	case open >= want:
		return exitTooLate, nil
	case open == 0:
		return exitNotYet, nil
	}
	return exitOK, nil
}

// ready waits until every URL answers 200 (a master's /readyz).
func ready(urls []string, timeout time.Duration, w io.Writer) error {
	if len(urls) == 0 {
		return errors.New("give the URLs to wait for")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hc, err := demoHTTPClient(2 * time.Second)
	if err != nil {
		return err
	}
	for _, u := range urls {
		var last string
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err == nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
				if resp.StatusCode == http.StatusOK {
					fmt.Fprintf(w, "%s: %s\n", u, strings.TrimSpace(string(b)))
					break
				}
			} else {
				last = err.Error()
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not ready after %v (last answer: %s)", u, timeout, last)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// newLeader polls the masters' /status pages, all at once every 20 ms,
// until one reports itself the leader and is not the killed one, and
// prints its id and the milliseconds since the kill. It asks each node for
// its own state: `baton cluster status` waits up to a second for every
// member, the dead one included, which made the demo see a new leader
// seconds after the election.
func newLeader(urls []string, not string, since time.Time, timeout time.Duration, w io.Writer) (int, error) {
	hc, err := demoHTTPClient(250 * time.Millisecond)
	if err != nil {
		return exitUsage, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Each node is asked on its own: the dead one's timeouts must not
	// slow down hearing the others.
	found := make(chan string, len(urls))
	var mu sync.Mutex
	last := map[string]string{}
	for _, u := range urls {
		go func() {
			for {
				id, err := statusLeader(ctx, hc, u)
				if err == nil && id != "" && id != not {
					found <- id
					return
				}
				if err != nil {
					mu.Lock()
					last[u] = err.Error()
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	select {
	case id := <-found:
		fmt.Fprintf(w, "%s %d\n", id, time.Since(since).Milliseconds())
		return exitOK, nil
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		var seen []string
		for _, v := range last {
			seen = append(seen, v)
		}
		sort.Strings(seen)
		return exitNotYet, fmt.Errorf("no master but %s reported itself leader within %v (last errors: %s)", orDash(not), timeout, orDash(strings.Join(seen, "; ")))
	}
}

// statusLeader returns the node's id if its /status says it is the leader,
// else "".
func statusLeader(ctx context.Context, hc *http.Client, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var st struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return "", fmt.Errorf("%s: %w", u, err)
	}
	if strings.EqualFold(st.State, "leader") {
		return st.ID, nil
	}
	return "", nil
}

// demoHTTPClient asks the masters' HTTP endpoints, presenting, on a
// cluster with TLS, the certificate the demo's baton commands use
// (BATON_TLS_*).
func demoHTTPClient(timeout time.Duration) (*http.Client, error) {
	hc := &http.Client{Timeout: timeout}
	if files := (security.Files{CA: os.Getenv("BATON_TLS_CA"), Cert: os.Getenv("BATON_TLS_CERT"), Key: os.Getenv("BATON_TLS_KEY")}); files.Enabled() {
		creds, err := security.Load(files, nil, nil)
		if err != nil {
			return nil, err
		}
		hc.Transport = &http.Transport{TLSClientConfig: creds.ClientConfig(security.RoleMaster)}
	}
	return hc, nil
}

// hostedEntry is one region a server reports: its name, and its state when
// the server reports one (a plain string means the region is open).
type hostedEntry struct {
	Name  string
	State string
}

func (h *hostedEntry) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		h.Name, h.State = s, ""
		return nil
	}
	var o struct {
		Name   string `json:"name"`
		Region string `json:"region"`
		State  string `json:"state"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("a hosted region is neither a name nor an object with a name: %s", b)
	}
	h.Name, h.State = o.Name, o.State
	if h.Name == "" {
		h.Name = o.Region
	}
	if h.Name == "" {
		return fmt.Errorf("a hosted region without a name: %s", b)
	}
	return nil
}

func (h hostedEntry) open() bool { return h.State == "" || strings.EqualFold(h.State, stateOpen) }

type rsRegionsJSON struct {
	Server   string        `json:"server"`
	Hosted   []hostedEntry `json:"hosted"`
	Assigned []hostedEntry `json:"assigned"`
}

// tableNames accepts {"tables":[...]} whose items are names or objects
// with a name (and an optional namespace).
func tableNames(path string) ([]string, error) {
	var doc struct {
		Tables []json.RawMessage `json:"tables"`
	}
	if err := decodeFile(path, &doc); err != nil {
		return nil, err
	}
	var names []string
	for _, raw := range doc.Tables {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			names = append(names, normTable(s))
			continue
		}
		var o struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		}
		if err := json.Unmarshal(raw, &o); err != nil || o.Name == "" {
			return nil, fmt.Errorf("%s: a table is neither a name nor an object with a name: %s", filepath.Base(path), raw)
		}
		if o.Namespace != "" && !strings.Contains(o.Name, ":") {
			o.Name = o.Namespace + ":" + o.Name
		}
		names = append(names, normTable(o.Name))
	}
	return names, nil
}

// report is verify's outcome: one line per check.
type report struct {
	lines  []string
	notYet bool // some check failed
	unsafe bool // a region is open on two servers
	counts map[string]int
}

func (r *report) pass(format string, a ...any) {
	r.lines = append(r.lines, "ok    "+fmt.Sprintf(format, a...))
}

func (r *report) fail(format string, a ...any) {
	r.notYet = true
	r.lines = append(r.lines, "FAIL  "+fmt.Sprintf(format, a...))
}

func (r *report) violation(format string, a ...any) {
	r.unsafe = true
	r.lines = append(r.lines, "FAIL  "+fmt.Sprintf(format, a...))
}

func (r *report) info(format string, a ...any) {
	r.lines = append(r.lines, "      "+fmt.Sprintf(format, a...))
}

func (r report) code() int {
	switch {
	case r.unsafe:
		return exitUnsafe
	case r.notYet:
		return exitNotYet
	}
	return exitOK
}

func (r report) print(w io.Writer) {
	for _, l := range r.lines {
		fmt.Fprintln(w, l)
	}
	switch r.code() {
	case exitOK:
		fmt.Fprintln(w, "RESULT: every region is OPEN on exactly one region server")
	case exitUnsafe:
		fmt.Fprintln(w, "RESULT: SAFETY VIOLATION: a region is open on more than one region server")
	default:
		fmt.Fprintln(w, "RESULT: checks failed")
	}
}

// maxListed bounds the regions named in one failure line.
const maxListed = 10

func listSome(names []string) string {
	sort.Strings(names)
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxListed], ", ") + fmt.Sprintf(", ... (%d in all)", len(names))
}

func verify(dir string, tables []string, perTable int, wantServers []string) (report, error) {
	var r report
	var regionsDoc struct {
		Regions []regionJSON `json:"regions"`
	}
	if err := decodeFile(filepath.Join(dir, "regions.json"), &regionsDoc); err != nil {
		return r, err
	}
	var serversDoc struct {
		Servers []serverJSON `json:"servers"`
	}
	if err := decodeFile(filepath.Join(dir, "servers.json"), &serversDoc); err != nil {
		return r, err
	}

	// 1. Tables: listed, and wholly there.
	listed, err := tableNames(filepath.Join(dir, "tables.json"))
	if err != nil {
		r.fail("table list unreadable: %v", err)
	}
	byTable := map[string][]regionJSON{}
	meta := map[string]regionJSON{}
	var dupMeta []string
	for _, g := range regionsDoc.Regions {
		if _, dup := meta[g.Name]; dup {
			dupMeta = append(dupMeta, g.Name)
		}
		meta[g.Name] = g
		byTable[normTable(g.Table)] = append(byTable[normTable(g.Table)], g)
	}
	if len(dupMeta) > 0 {
		r.fail("region list names %s twice: %s", regionsN(len(dupMeta)), listSome(dupMeta))
	}
	var missingTables, wrongCount []string
	for _, t := range tables {
		if listed != nil && !slices.Contains(listed, t) && !slices.Contains(listed, normTable(t)) {
			missingTables = append(missingTables, t)
		}
		if n := len(byTable[normTable(t)]); n != perTable {
			wrongCount = append(wrongCount, fmt.Sprintf("%s has %d", t, n))
		}
	}
	switch {
	case err != nil:
	case len(missingTables) > 0:
		r.fail("tables missing from the table list: %s", strings.Join(missingTables, ", "))
	default:
		r.pass("all %d tables listed (%s)", len(tables), strings.Join(tables, ", "))
	}
	if len(wrongCount) > 0 {
		r.fail("tables without exactly %s: %s", regionsN(perTable), strings.Join(wrongCount, "; "))
	} else {
		r.pass("every table has its %s (%s)", regionsN(perTable), regionsN(perTable*len(tables)))
	}

	// 2. The masters' view: every region OPEN on a server.
	var notOpen []string
	for _, g := range regionsDoc.Regions {
		if g.State != stateOpen || g.Server == "" {
			notOpen = append(notOpen, fmt.Sprintf("%s(%s@%s)", g.Name, g.State, orDash(g.Server)))
		}
	}
	if len(notOpen) > 0 {
		r.fail("masters record %s not OPEN on a server: %s", regionsN(len(notOpen)), listSome(notOpen))
	} else {
		r.pass("masters record all %d regions OPEN", len(regionsDoc.Regions))
	}

	// 3. Servers registered.
	known := map[string]serverJSON{}
	var desc []string
	for _, s := range serversDoc.Servers {
		known[s.ID] = s
		desc = append(desc, fmt.Sprintf("%s %s (%s)", s.ID, s.LeaseState, regionsN(int(s.RegionCount))))
	}
	var absent []string
	for _, s := range wantServers {
		if _, ok := known[s]; !ok {
			absent = append(absent, s)
		}
	}
	if len(absent) > 0 {
		r.fail("region servers not registered: %s (registered: %s)", strings.Join(absent, ", "), strings.Join(desc, "; "))
	} else {
		r.pass("%d region servers registered: %s", len(serversDoc.Servers), strings.Join(desc, "; "))
	}

	// 4. The servers' own answers: each region open exactly once, where
	// the masters say, and nothing the masters do not know.
	hostedBy := map[string][]string{} // region -> servers that report it open
	r.counts = map[string]int{}
	var ids []string
	for id := range known {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	answered := 0
	for _, id := range ids {
		var doc rsRegionsJSON
		if err := decodeFile(filepath.Join(dir, "hosted-"+id+".json"), &doc); err != nil {
			r.fail("%s: no answer to `rs regions`: %v", id, err)
			continue
		}
		answered++
		var transit []string
		for _, h := range doc.Hosted {
			if !h.open() {
				transit = append(transit, h.Name+"("+h.State+")")
				continue
			}
			hostedBy[h.Name] = append(hostedBy[h.Name], id)
			r.counts[id]++
		}
		if len(transit) > 0 {
			r.fail("%s reports %s in transition: %s", id, regionsN(len(transit)), listSome(transit))
		}
		// The masters' per-server view must agree with their region list.
		var assignedNotInMeta []string
		for _, a := range doc.Assigned {
			if g, ok := meta[a.Name]; !ok || !sameServer(g.Server, id) {
				assignedNotInMeta = append(assignedNotInMeta, a.Name)
			}
		}
		if len(assignedNotInMeta) > 0 {
			r.fail("%s: the masters' `assigned` list disagrees with the region list on: %s", id, listSome(assignedNotInMeta))
		}
	}
	var twice, missing, misplaced, strays []string
	for name, g := range meta {
		on := hostedBy[name]
		switch {
		case len(on) > 1:
			twice = append(twice, fmt.Sprintf("%s on %s", name, strings.Join(on, "+")))
		case len(on) == 0:
			missing = append(missing, name)
		case !sameServer(g.Server, on[0]):
			misplaced = append(misplaced, fmt.Sprintf("%s on %s, masters say %s", name, on[0], orDash(g.Server)))
		}
	}
	for name, on := range hostedBy {
		if _, ok := meta[name]; !ok {
			strays = append(strays, fmt.Sprintf("%s on %s", name, strings.Join(on, "+")))
			if len(on) > 1 {
				twice = append(twice, fmt.Sprintf("%s on %s", name, strings.Join(on, "+")))
			}
		}
	}
	if len(twice) > 0 {
		r.violation("regions OPEN on more than one server: %s", listSome(twice))
	} else {
		r.pass("no region is open on two servers (answers from %d/%d servers)", answered, len(ids))
	}
	if len(missing) > 0 {
		r.fail("regions open on no server: %s", listSome(missing))
	} else if len(meta) > 0 {
		r.pass("no region is missing: all %d are open on a server", len(meta))
	}
	if len(misplaced) > 0 {
		r.fail("regions open elsewhere than the masters record: %s", listSome(misplaced))
	}
	if len(strays) > 0 {
		r.fail("regions open that the masters do not know (leftovers of a rolled-back create?): %s", listSome(strays))
	}
	var perServer []string
	for _, id := range ids {
		perServer = append(perServer, fmt.Sprintf("%s %d", id, r.counts[id]))
	}
	r.info("open regions per server, by their own answers: %s", strings.Join(perServer, ", "))
	return r, nil
}

// normTable drops the default namespace: "default:t1" and "t1" are one
// table.
func normTable(s string) string { return strings.TrimPrefix(s, "default:") }

// regionsN is "1 region" or "n regions".
func regionsN(n int) string {
	if n == 1 {
		return "1 region"
	}
	return fmt.Sprintf("%d regions", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
