package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// The placement invariant, checked after every region-server scenario
// from the region servers' own answers (RegionServer.ListRegions, called
// directly on each server, not through a master), the way
// scripts/democheck's verify does for the demos:
//
//   - no region is open on two servers;
//   - no region is lost: every region of a table the masters list is open
//     on exactly one server, the one (and the incarnation, by start code)
//     the masters record, and the masters record it OPEN;
//   - every table is wholly there (listed ENABLED with all its regions
//     OPEN) or wholly absent (not listed, no region recorded, none open
//     anywhere);
//   - no server hosts a region the masters do not know.

// tableWant is what a scenario expects of one table (default namespace).
type tableWant struct {
	name    string
	regions int
	present bool
}

// placement is one reading of the cluster: the masters' view and the
// region servers' own answers.
type placement struct {
	tables  map[string]*adminpb.Table  // by "ns:name"
	regions map[string]*adminpb.Region // the masters' view, by region name
	// recordedSC is the start code each region's record names (from the
	// leader's /debug/domain); nil if the agents do not serve it.
	recordedSC map[string]uint64
	servers    map[string]*adminpb.Server           // the masters' list, by id
	answers    map[string]*rspb.ListRegionsResponse // the servers' own answers (second pass), by id
	hostedBy   map[string][]string                  // region -> servers whose second answer lists it
	tableOf    map[string]string                    // region -> table, by the servers' answers
	twice      []string                             // regions open on two servers in both passes
	unanswered []string                             // running servers that did not answer
	first      map[string]map[string]bool           // first pass: server -> hosted regions
}

const defaultNS = "default"

func qualified(table string) string {
	if strings.Contains(table, ":") {
		return table
	}
	return defaultNS + ":" + table
}

// readPlacement reads the servers' own answers twice, around the masters'
// view. A region counts as open twice only if both passes say so: a move
// closes on the source before it opens on the target, so one pass that
// read the source before the close and the target after the open can list
// a region twice, but the second pass (which reads the source again after
// the first read the target) cannot, unless it really is open twice.
func readPlacement(ctx context.Context, c *harness.Cluster) (*placement, error) {
	p := &placement{
		tables: map[string]*adminpb.Table{}, regions: map[string]*adminpb.Region{},
		servers: map[string]*adminpb.Server{}, answers: map[string]*rspb.ListRegionsResponse{},
		hostedBy: map[string][]string{}, tableOf: map[string]string{}, first: map[string]map[string]bool{},
	}
	ids := c.RegionServerIDs()
	pass := func(record func(id string, r *rspb.ListRegionsResponse)) {
		for _, id := range ids {
			if !c.RegionServer(id).Running() {
				continue
			}
			r, err := c.RSRegions(ctx, id)
			if err != nil {
				if !slices.Contains(p.unanswered, id) {
					p.unanswered = append(p.unanswered, id)
				}
				continue
			}
			record(id, r)
		}
	}
	pass(func(id string, r *rspb.ListRegionsResponse) {
		m := map[string]bool{}
		for _, h := range r.GetRegions() {
			m[h.GetRegion()] = true
		}
		p.first[id] = m
	})

	cl := c.Client()
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tables, err := cl.ListTables(mctx, "")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	for _, t := range tables {
		p.tables[t.GetNamespace()+":"+t.GetName()] = t
	}
	regions, err := cl.ListRegions(mctx, "")
	if err != nil {
		return nil, fmt.Errorf("list regions: %w", err)
	}
	for _, g := range regions {
		p.regions[g.GetName()] = g
	}
	servers, err := cl.ListServers(mctx)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	for _, s := range servers {
		p.servers[s.GetId()] = s
	}
	p.recordedSC, err = recordedStartCodes(mctx, c)
	if err != nil {
		return nil, err
	}

	pass(func(id string, r *rspb.ListRegionsResponse) {
		p.answers[id] = r
		for _, h := range r.GetRegions() {
			p.hostedBy[h.GetRegion()] = append(p.hostedBy[h.GetRegion()], id)
			p.tableOf[h.GetRegion()] = h.GetTable()
		}
	})
	for region, on := range p.hostedBy {
		if len(on) < 2 {
			continue
		}
		n := 0
		for _, id := range on {
			if p.first[id][region] {
				n++
			}
		}
		if n >= 2 {
			p.twice = append(p.twice, fmt.Sprintf("%s on %s", region, strings.Join(on, "+")))
		}
	}
	sort.Strings(p.twice)
	return p, nil
}

// recordedStartCodes reads the start code of every region record from the
// leader's /debug/domain (region/<name> {"server", "start_code", ...}); nil
// without error if the agents do not serve it.
func recordedStartCodes(ctx context.Context, c *harness.Cluster) (map[string]uint64, error) {
	leader, err := liveLeader(ctx, c, 10*time.Second)
	if err != nil {
		return nil, err
	}
	entries, err := c.Domain(ctx, leader, "region/")
	if errors.Is(err, harness.ErrNoDomainEndpoint) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("domain of %s: %w", leader, err)
	}
	out := map[string]uint64{}
	for k, v := range entries {
		var rec struct {
			StartCode uint64 `json:"start_code"`
		}
		if err := json.Unmarshal([]byte(v), &rec); err != nil {
			return nil, fmt.Errorf("domain %s: %w", k, err)
		}
		out[strings.TrimPrefix(k, "region/")] = rec.StartCode
	}
	return out, nil
}

// liveLeader asks every running master's /status (1 s each, so that a
// frozen one costs a second, not a client's whole call timeout) until one
// says it leads with a running executor, at most within. The masters in
// except are not asked: a deposed leader says it leads until it learns
// otherwise, so a test waiting for a new leader names the old one.
func liveLeader(ctx context.Context, c *harness.Cluster, within time.Duration, except ...string) (string, error) {
	var leader string
	var last error = errors.New("no master says it leads")
	testwait.Until(within, func() bool {
		for _, n := range c.Nodes {
			if !n.Running() || slices.Contains(except, n.ID) {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, n.ID)
			cancel()
			if err != nil {
				last = err
				continue
			}
			if st.State == "Leader" && st.Executor {
				leader = n.ID
				return true
			}
		}
		return ctx.Err() != nil // the caller's deadline ends the wait too
	})
	if leader == "" {
		return "", fmt.Errorf("no ready leader within %v: %w", within, last)
	}
	return leader, nil
}

// check returns the safety violations (a region open on two servers,
// which no waiting can excuse) and the other problems, which the cluster
// may still be settling (a region not reassigned yet). want lists every
// table the scenario created or tried to create; any other table the
// masters list is a problem.
func (p *placement) check(want []tableWant) (violations, problems []string) {
	violations = append(violations, p.twice...)
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for _, id := range p.unanswered {
		bad("region server %s did not answer ListRegions", id)
	}
	for id, r := range p.answers {
		if r.GetStartCode() == 0 {
			bad("region server %s is not registered (start code 0)", id)
		}
	}
	byTable := map[string][]*adminpb.Region{}
	for _, g := range p.regions {
		byTable[qualified(g.GetTable())] = append(byTable[qualified(g.GetTable())], g)
	}
	wanted := map[string]bool{}
	for _, w := range want {
		name := qualified(w.name)
		wanted[name] = true
		t, listed := p.tables[name]
		if !w.present {
			if listed {
				bad("table %s should be wholly absent but is listed (%s)", name, t.GetState())
			}
			if n := len(byTable[name]); n > 0 {
				bad("table %s should be wholly absent but the masters record %d of its regions", name, n)
			}
			var open []string
			for region, on := range p.hostedBy {
				if qualified(p.tableOf[region]) == name || strings.HasPrefix(region, name+",") {
					open = append(open, region+"@"+strings.Join(on, "+"))
				}
			}
			if len(open) > 0 {
				bad("table %s should be wholly absent but %d of its regions are open: %s", name, len(open), listSome(open))
			}
			continue
		}
		if !listed {
			bad("table %s is not listed", name)
		} else if t.GetState() != "ENABLED" {
			bad("table %s is %s, want ENABLED", name, t.GetState())
		}
		if n := len(byTable[name]); n != w.regions {
			bad("table %s has %d regions recorded, want %d", name, n, w.regions)
		}
	}
	for name, t := range p.tables {
		if !wanted[name] {
			bad("unexpected table %s (%s) is listed", name, t.GetState())
		}
	}
	var notOpen, lost, misplaced, staleSC []string
	for name, g := range p.regions {
		on := p.hostedBy[name]
		srv := g.GetServer()
		switch {
		case g.GetState() != "OPEN" || srv == "":
			notOpen = append(notOpen, fmt.Sprintf("%s(%s@%s)", name, g.GetState(), orDash(srv)))
		case len(on) == 0:
			lost = append(lost, fmt.Sprintf("%s(recorded on %s)", name, srv))
		case len(on) == 1 && on[0] != srv:
			misplaced = append(misplaced, fmt.Sprintf("%s on %s, recorded on %s", name, on[0], srv))
		case len(on) == 1 && p.recordedSC != nil && p.answers[srv] != nil && p.recordedSC[name] != p.answers[srv].GetStartCode():
			staleSC = append(staleSC, fmt.Sprintf("%s recorded on %s start code %d, the server's is %d", name, srv, p.recordedSC[name], p.answers[srv].GetStartCode()))
		}
	}
	if len(notOpen) > 0 {
		bad("%d regions are not recorded OPEN on a server: %s", len(notOpen), listSome(notOpen))
	}
	if len(lost) > 0 {
		bad("%d regions are open on no server: %s", len(lost), listSome(lost))
	}
	if len(misplaced) > 0 {
		bad("%d regions are open elsewhere than recorded: %s", len(misplaced), listSome(misplaced))
	}
	if len(staleSC) > 0 {
		bad("%d regions are recorded on another incarnation than the one hosting them: %s", len(staleSC), listSome(staleSC))
	}
	var strays []string
	for region, on := range p.hostedBy {
		if _, ok := p.regions[region]; !ok {
			strays = append(strays, region+"@"+strings.Join(on, "+"))
		}
	}
	if len(strays) > 0 {
		bad("%d regions are open that the masters do not know: %s", len(strays), listSome(strays))
	}
	sort.Strings(problems)
	return violations, problems
}

// perServer is "rs1 5, rs2 6, ..." from the servers' own answers.
func (p *placement) perServer() string {
	var ids []string
	for id := range p.answers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s %d", id, len(p.answers[id].GetRegions())))
	}
	return strings.Join(parts, ", ")
}

// hostedOn returns the regions region server id's own (second) answer
// lists.
func (p *placement) hostedOn(id string) []string {
	var out []string
	for _, h := range p.answers[id].GetRegions() {
		out = append(out, h.GetRegion())
	}
	return out
}

// checkPlacement waits until the placement invariant holds for want, at
// most within, and returns the reading that passed. A region open on two
// servers fails the test at once; anything else still wrong at the end
// fails it with the last reading's problems.
func checkPlacement(t *testing.T, ctx context.Context, c *harness.Cluster, want []tableWant, within time.Duration) *placement {
	t.Helper()
	start := time.Now()
	var last []string
	var lastErr error
	var held *placement
	testwait.Until(within, func() bool {
		p, err := readPlacement(ctx, c)
		if err != nil {
			lastErr = err
			return ctx.Err() != nil
		}
		violations, problems := p.check(want)
		if len(violations) > 0 {
			t.Fatalf("SAFETY VIOLATION: %d regions open on two region servers (by their own answers, twice): %s", len(violations), listSome(violations))
		}
		if len(problems) > 0 {
			last, lastErr = problems, nil
			return ctx.Err() != nil
		}
		held = p
		return true
	})
	if held == nil {
		if lastErr != nil {
			t.Fatalf("placement not readable after %v: %v (earlier problems: %s)", within, lastErr, strings.Join(last, "; "))
		}
		t.Fatalf("placement invariant does not hold after %v:\n  %s", within, strings.Join(last, "\n  "))
	}
	present, regions := 0, 0
	for _, w := range want {
		if w.present {
			present++
			regions += w.regions
		}
	}
	t.Logf("placement holds (checked in %v): %d tables wholly there (%d regions, each open on exactly one server, the recorded incarnation), %d wholly absent; open regions per server, by their own answers: %s",
		time.Since(start).Round(time.Millisecond), present, regions, len(want)-present, held.perServer())
	return held
}

// maxListed bounds the regions named in one message.
const maxListed = 10

func listSome(names []string) string {
	sort.Strings(names)
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxListed], ", ") + fmt.Sprintf(", ... (%d in all)", len(names))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// startRetrying calls start (a CreateTable, MoveRegion, Balance... with a
// fixed nonce) until the cluster acknowledges it with an id or ctx ends,
// as submitRetrying does for Submit.
func startRetrying(ctx context.Context, what string, start func(ctx context.Context) (uint64, error)) (id uint64, attempts int, err error) {
	for {
		attempts++
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		id, err = start(cctx)
		cancel()
		if err == nil {
			return id, attempts, nil
		}
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.AlreadyExists {
			return 0, attempts, fmt.Errorf("%s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return 0, attempts, fmt.Errorf("%s after %d attempts: %w", what, attempts, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rsLogLine is one line of a region server's log (hclog's text format).
type rsLogLine struct {
	msg    string            // the message, e.g. "region opened"
	fields map[string]string // key=value pairs
	raw    string
}

var logField = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

// parseLog splits log text into lines with their message and fields.
// Lines without a level tag (banners) are skipped.
func parseLog(text string) []rsLogLine {
	var out []rsLogLine
	for _, l := range strings.Split(text, "\n") {
		i := strings.Index(l, "] ")
		if i < 0 || !strings.Contains(l[:i+1], "[") {
			continue
		}
		rest := strings.TrimSpace(l[i+2:])
		// "baton.rs.rs1: region opened: k=v ..."
		_, after, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		msg, kv, _ := strings.Cut(after, ": ")
		f := map[string]string{}
		for _, m := range logField.FindAllStringSubmatch(kv, -1) {
			v := m[2]
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			f[m[1]] = v
		}
		out = append(out, rsLogLine{msg: msg, fields: f, raw: l})
	}
	return out
}

// highestTermLogged is the highest term a region server's log says it
// raised its fencing term to ("fencing term raised: ... term=N").
func highestTermLogged(text string) uint64 {
	var hi uint64
	for _, l := range parseLog(text) {
		if l.msg != "fencing term raised" {
			continue
		}
		if n, err := strconv.ParseUint(l.fields["term"], 10, 64); err == nil && n > hi {
			hi = n
		}
	}
	return hi
}
