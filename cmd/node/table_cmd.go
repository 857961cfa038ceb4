package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
)

var tableUsage = `usage: baton table <command> [flags]

commands:
  create NAME [--regions N] [--namespace NS] [--wait]   create a table of N regions
  delete NAME [--namespace NS] [--wait]                 delete a table (it must be disabled)
  disable NAME [--namespace NS] [--wait]                close every region of a table
  enable NAME [--namespace NS] [--wait]                 open every region of a table
  describe NAME [--namespace NS] [--stale]              show a table, its region counts and
                                                        its first 1000 regions
  list [--namespace NS] [--state S] [--page-size N] [--page-token T | --all] [--stale]
                                                        list the tables with their region
                                                        counts: the first page (100), or --all

NAME may also be NS:NAME. Without a namespace, a table is in "default".
` + fmt.Sprintf(clientFlagsNote, "table")

func init() {
	topLevel.add(topCommand{
		name: "table", rank: 60, run: (*cli).table,
		summary: `create NAME [--regions N], delete|enable|disable|describe NAME, list
(NAME or NS:NAME; --namespace NS)`,
	})
}

func (c *cli) table(args []string) int {
	return c.subcommands("table", tableUsage, args, map[string]func([]string) int{
		"create":   c.tableCreate,
		"delete":   func(a []string) int { return c.tableChange("delete", (*client.Client).DeleteTable, a) },
		"disable":  func(a []string) int { return c.tableChange("disable", (*client.Client).DisableTable, a) },
		"enable":   func(a []string) int { return c.tableChange("enable", (*client.Client).EnableTable, a) },
		"describe": c.tableDescribe,
		"list":     c.tableList,
	})
}

// splitTable reads a table argument, NAME or NS:NAME, with --namespace:
// the table's namespace (default if none is given) and name.
func splitTable(arg, nsFlag string) (ns, name string, err error) {
	ns, name = nsFlag, arg
	if before, after, found := strings.Cut(arg, ":"); found {
		if before == "" {
			return "", "", usagef("table %q: the namespace before ':' is empty", arg)
		}
		if nsFlag != "" && nsFlag != before {
			return "", "", usagef("table %q is in namespace %q, but --namespace says %q", arg, before, nsFlag)
		}
		ns, name = before, after
	}
	if name == "" {
		return "", "", usagef("table %q: the name is empty", arg)
	}
	if ns == "" {
		ns = client.DefaultNamespace
	}
	if err := checkName("namespace", ns); err != nil {
		return "", "", err
	}
	if err := checkName("table", name); err != nil {
		return "", "", err
	}
	return ns, name, nil
}

// checkName refuses a namespace or table name the masters would refuse, as
// a usage error before anything is sent or echoed.
func checkName(what, s string) error {
	if err := domain.CheckName(what, s); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func (e *command) namespaceFlag() *string {
	return e.fs.String("namespace", "", "the table's namespace (default: the one in NS:NAME, else \"default\")")
}

// parseTable parses args for the one table NAME they name, qualified by
// --namespace (nsFlag) where given. ok is false when the command is over,
// with exit code code.
func (e *command) parseTable(args []string, nsFlag *string) (ns, name string, code int, ok bool) {
	pos, code, ok := e.parse(args, 1, "table NAME")
	if !ok {
		return "", "", code, false
	}
	ns, name, err := splitTable(pos[0], *nsFlag)
	if err != nil {
		return "", "", e.fail(err), false
	}
	return ns, name, exitOK, true
}

func (c *cli) tableCreate(args []string) int {
	e := c.command("table create", "NAME [--regions N] [--namespace NS] [--wait] [--nonce N]", tableAdvice)
	regions := e.fs.Int("regions", 1, fmt.Sprintf("how many regions to split the table into, 1 to %d", client.MaxRegions))
	nsFlag, wait, nonce := e.namespaceFlag(), e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "table NAME")
	if !ok {
		return code
	}
	if *regions < 1 || *regions > client.MaxRegions {
		return e.fail(usagef("--regions %d: want 1 to %d", *regions, client.MaxRegions))
	}
	ns, name, err := splitTable(pos[0], *nsFlag)
	if err != nil {
		return e.fail(err)
	}
	return e.start(fmt.Sprintf("create table %s:%s (%s)", ns, name, regionsN(*regions)), *wait, func(cl *client.Client) (uint64, error) {
		return cl.CreateTable(c.ctx, ns, name, *regions, *nonce)
	})
}

func (c *cli) tableChange(verb string, start func(cl *client.Client, ctx context.Context, ns, name, nonce string) (uint64, error), args []string) int {
	e := c.command("table "+verb, "NAME [--namespace NS] [--wait] [--nonce N]", tableAdvice)
	nsFlag, wait, nonce := e.namespaceFlag(), e.waitFlag(), e.nonceFlag()
	ns, name, code, ok := e.parseTable(args, nsFlag)
	if !ok {
		return code
	}
	return e.start(fmt.Sprintf("%s table %s:%s", verb, ns, name), *wait, func(cl *client.Client) (uint64, error) {
		return start(cl, c.ctx, ns, name, *nonce)
	})
}

// regionJSON and tableJSON are the JSON shapes of regions and tables.
type regionJSON struct {
	Name   string `json:"name"`
	Table  string `json:"table"`
	State  string `json:"state"`
	Server string `json:"server"`
	ProcID uint64 `json:"proc_id"`
}

type tableJSON struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	State     string `json:"state"`
	// Regions is set by table describe only: the first regions, all of
	// them unless RegionsTruncated (NextPageToken then resumes with
	// region list --table).
	Regions          *[]regionJSON `json:"regions,omitempty"`
	RegionsTruncated bool          `json:"regions_truncated,omitempty"`
	NextPageToken    string        `json:"next_page_token,omitempty"`
	// RegionCount counts every region, RegionsByState by recorded state.
	RegionCount    int32            `json:"region_count"`
	RegionsByState map[string]int32 `json:"regions_by_state"`
	// RegionCounts is set by table list: regions by state (snake_case),
	// those on a server that is not live counted as offline_on_dead_server
	// instead of by their recorded state.
	RegionCounts map[string]int `json:"region_counts,omitempty"`
	Read         *readJSON      `json:"read,omitempty"`
}

// offlineOnDead is the region_counts key, and the human words, of regions
// assigned to a server that is not live (expired, unconfirmed or unknown).
const (
	offlineOnDeadKey   = "offline_on_dead_server"
	offlineOnDeadHuman = "offline on a dead server"
)

// countRegions counts a table's regions by state from its (state,
// server) groups; those on a server whose lease state in servers is not
// live or suspect count as offline on a dead server, since their recorded
// state (OPEN) says what the masters last decided, not that anyone serves
// them. servers nil: the servers are unknown, and every region counts by
// its recorded state.
func countRegions(gs []*adminpb.RegionGroup, servers map[string]string) map[string]int {
	counts := map[string]int{"open": 0, "opening": 0, "closing": 0}
	if servers != nil {
		counts[offlineOnDeadKey] = 0
	}
	for _, g := range gs {
		if srv := g.GetServer(); servers != nil && srv != "" {
			// A lease no leader vouched for (a stale read without one)
			// counts by the recorded state, as with no servers at all.
			if st := servers[srv]; st != client.LeaseLive && st != client.LeaseSuspect && st != client.LeaseUnknown {
				counts[offlineOnDeadKey] += int(g.GetCount())
				continue
			}
		}
		counts[strings.ToLower(g.GetState())] += int(g.GetCount())
	}
	return counts
}

// leasesUnknown reports whether any of servers' lease states is unknown.
func leasesUnknown(servers map[string]string) bool {
	for _, st := range servers {
		if st == client.LeaseUnknown {
			return true
		}
	}
	return false
}

// countsSummary is the human form of countRegions: "3 (1 OPEN, 2 offline
// on a dead server)".
func countsSummary(total int, counts map[string]int) string {
	if total == 0 {
		return "0"
	}
	var keys []string
	for k, n := range counts {
		if n > 0 && k != offlineOnDeadKey {
			keys = append(keys, k)
		}
	}
	order := map[string]int{"open": 0, "opening": 1, "closing": 2}
	sort.Slice(keys, func(i, j int) bool {
		oi, iok := order[keys[i]]
		oj, jok := order[keys[j]]
		if iok != jok {
			return iok
		}
		if iok {
			return oi < oj
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToUpper(k)))
	}
	if n := counts[offlineOnDeadKey]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", n, offlineOnDeadHuman))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func toRegionsJSON(rs []*adminpb.Region) []regionJSON {
	out := []regionJSON{}
	for _, r := range rs {
		out = append(out, toRegionJSON(r))
	}
	return out
}

func toTableJSON(t *adminpb.Table) tableJSON {
	byState := t.GetRegionsByState()
	if byState == nil {
		byState = map[string]int32{}
	}
	return tableJSON{Namespace: t.GetNamespace(), Name: t.GetName(), State: t.GetState(), RegionCount: t.GetRegionCount(),
		RegionsByState: byState, Read: toReadJSON(t.GetRead())}
}

func (c *cli) tableDescribe(args []string) int {
	e := c.command("table describe", "NAME [--namespace NS] [--stale]", tableAdvice)
	nsFlag := e.namespaceFlag()
	rf := addReadFlags(e.fs)
	ns, name, code, ok := e.parseTable(args, nsFlag)
	if !ok {
		return code
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		t, err := cl.DescribeTable(c.ctx, ns, name, rf.opts()...)
		doc := toTableJSON(t)
		regions := toRegionsJSON(t.GetRegions())
		doc.Regions, doc.RegionsTruncated, doc.NextPageToken = &regions, t.GetRegionsTruncated(), t.GetNextPageToken()
		return doc, func() {
			fmt.Fprintf(c.stdout, "table    %s:%s\n", t.GetNamespace(), t.GetName())
			fmt.Fprintf(c.stdout, "state    %s\n", t.GetState())
			fmt.Fprintf(c.stdout, "regions  %s\n", regionSummary(t.GetRegionCount(), t.GetRegionsByState()))
			if len(t.GetRegions()) > 0 {
				fmt.Fprintln(c.stdout)
				c.printRegions(t.GetRegions(), false)
			}
			if t.GetRegionsTruncated() {
				fmt.Fprintf(c.stderr, "(the first %s of %d; the rest: 'baton region list --table %s:%s --page-token %s', or --all)\n",
					regionsN(len(t.GetRegions())), t.GetRegionCount(), t.GetNamespace(), t.GetName(), t.GetNextPageToken())
			}
			c.printServed(t.GetRead())
		}, err
	})
}

// regionSummary says a table's region count by state: "4 (3 OPEN, 1
// OPENING)".
func regionSummary(total int32, by map[string]int32) string {
	if total == 0 {
		return "0"
	}
	states := make([]string, 0, len(by))
	for s := range by {
		states = append(states, s)
	}
	sort.Strings(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%d %s", by[s], s)
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// tablesJSON is the --json document of table list.
type tablesJSON struct {
	Tables        []tableJSON `json:"tables"`
	NextPageToken string      `json:"next_page_token,omitempty"`
	Read          *readJSON   `json:"read,omitempty"`
}

func (c *cli) tableList(args []string) int {
	e := c.command("table list", "[--namespace NS] [--state S] [--page-size N] [--page-token T | --all] [--stale]", tableAdvice)
	ns := e.fs.String("namespace", "", "only the tables of this namespace (default: every namespace)")
	states, pf, rf := e.listFlags("tables", catalog.DefaultTablePageSize, catalog.MaxTablePageSize, "CREATING, ENABLED, DISABLING, DISABLED, ENABLING, DELETING")
	if code, ok := e.parseList(args, pf); !ok {
		return code
	}
	if *ns != "" {
		if err := checkName("namespace", *ns); err != nil {
			return e.fail(err)
		}
	}
	return e.withClient(func(cl *client.Client) int {
		// The servers' lease states come from the leader only; without
		// them (no leader, with --stale) regions count by recorded state,
		// and the output says so. There are few servers beside regions:
		// they are read once, all pages of them.
		var servers map[string]string
		var serversErr error
		serversOnce := func() {
			if servers != nil || serversErr != nil {
				return
			}
			var ss []*adminpb.Server
			// With --stale the servers are read stale too: a
			// linearizable read would wait for a leader the command was
			// told not to need.
			if ss, serversErr = cl.ListServers(c.ctx, rf.optsQuiet()...); serversErr == nil {
				servers = map[string]string{}
				for _, s := range ss {
					servers[s.GetId()] = s.GetLeaseState()
				}
			}
		}
		toJSON := func(t *adminpb.Table) tableJSON {
			serversOnce()
			j := toTableJSON(t)
			j.RegionCounts = countRegions(t.GetRegionGroups(), servers)
			return j
		}
		show := showRows(c.stdout, []string{"NAMESPACE", "NAME", "STATE", "REGIONS"}, func(t *adminpb.Table) []string {
			return []string{t.GetNamespace(), t.GetName(), t.GetState(),
				countsSummary(int(t.GetRegionCount()), toJSON(t).RegionCounts)}
		})
		tail := func(total int) {
			if total == 0 {
				fmt.Fprintln(c.stdout, "no tables")
				return
			}
			if serversErr != nil {
				fmt.Fprintf(c.stderr, "(region servers unknown, regions counted by recorded state: %s)\n", status.Convert(serversErr).Message())
			} else if leasesUnknown(servers) {
				fmt.Fprintln(c.stderr, "(region servers' leases unknown: no leader answered; regions on servers recorded live counted by recorded state)")
			}
			c.printServed(rf.served)
		}
		req := &adminpb.ListTablesRequest{Namespace: *ns, States: *states, PageSize: int32(pf.size), PageToken: pf.token}
		fetch := func(token string) ([]*adminpb.Table, string, error) {
			req.PageToken = token
			r, err := cl.ListTablesPage(c.ctx, req, rf.opts()...)
			return r.GetTables(), r.GetNextPageToken(), err
		}
		return listPages(e, pf, rf, pagedList[*adminpb.Table]{
			cmd: "table list", noun: "tables", key: "tables",
			fetch: fetch, show: show, tail: tail,
			toJSON: func(t *adminpb.Table) any { return toJSON(t) },
			pageJSON: func(tables []*adminpb.Table, next string) any {
				doc := tablesJSON{Tables: []tableJSON{}, NextPageToken: next, Read: toReadJSON(rf.served)}
				for _, t := range tables {
					doc.Tables = append(doc.Tables, toJSON(t))
				}
				return doc
			},
		})
	})
}

// ---- regions

var regionUsage = `usage: baton region <command> [flags]

commands:
  list [--table T] [--state S] [--server ID] [--page-size N] [--page-token T | --all]
                                     list the regions (of one table: NAME or NS:NAME),
                                     filtered by the masters: the first page (1000),
                                     or with --all every page, printed as each arrives
  move REGION [--to SERVER] [--wait] move a region to a region server
                                     (without --to: any other live one)
  assign REGION [--server S] [--override --yes] [--wait]
                                     open a closed region (repair kit); a region
                                     in transition or locked needs --override
  unassign REGION [--override] --yes [--wait]
                                     close a region (repair kit), the same way;
                                     it takes the region offline, so it needs --yes
` + fmt.Sprintf(clientFlagsNote, "region")

func init() {
	topLevel.add(topCommand{
		name: "region", rank: 70, run: (*cli).region,
		summary: `list [--table T], move REGION [--to SERVER],
assign REGION [--server S], unassign REGION`,
	})
}

func (c *cli) region(args []string) int {
	return c.subcommands("region", regionUsage, args, map[string]func([]string) int{
		"list":     c.regionList,
		"move":     c.regionMove,
		"assign":   c.regionAssign,
		"unassign": c.regionUnassign,
	})
}

// regionsJSON is the --json document of region list.
type regionsJSON struct {
	Regions       []regionJSON `json:"regions"`
	NextPageToken string       `json:"next_page_token,omitempty"`
	Read          *readJSON    `json:"read,omitempty"`
}

// printRegions prints regions as a table; withTable adds their table's
// column.
func (c *cli) printRegions(rs []*adminpb.Region, withTable bool) {
	(&columns{w: c.stdout}).print(regionRows(rs, withTable, true))
}

// regionRows are the rows printRegions prints, with the header or not.
func regionRows(rs []*adminpb.Region, withTable, header bool) [][]string {
	var rows [][]string
	row := func(cells ...string) {
		if !withTable {
			cells = cells[1:]
		}
		rows = append(rows, cells)
	}
	if header {
		row("TABLE", "REGION", "STATE", "SERVER", "PROC")
	}
	for _, r := range rs {
		server, proc := r.GetServer(), "-"
		if server == "" {
			server = "-"
		}
		if r.GetProcId() != 0 {
			proc = strconv.FormatUint(r.GetProcId(), 10)
		}
		row(r.GetTable(), r.GetName(), r.GetState(), server, proc)
	}
	return rows
}

func toRegionJSON(r *adminpb.Region) regionJSON {
	return regionJSON{Name: r.GetName(), Table: r.GetTable(), State: r.GetState(), Server: r.GetServer(), ProcID: r.GetProcId()}
}

func (c *cli) regionList(args []string) int {
	e := c.command("region list", "[--table T] [--state S] [--server ID] [--page-size N] [--page-token T | --all] [--stale]", regionAdvice)
	table := e.fs.String("table", "", "only the regions of this table, NAME or NS:NAME (default: every table)")
	server := e.fs.String("server", "", "only the regions recorded on this region server, as 'baton rs list' names it")
	states, pf, rf := e.listFlags("regions", catalog.DefaultRegionPageSize, catalog.MaxRegionPageSize, "OFFLINE, OPENING, OPEN, CLOSING, CLOSED, FAILED_OPEN")
	if code, ok := e.parseList(args, pf); !ok {
		return code
	}
	if *table != "" {
		// Checked as the table commands check it; sent qualified.
		ns, name, err := splitTable(*table, "")
		if err != nil {
			return e.fail(err)
		}
		*table = ns + ":" + name
	}
	return e.withClient(func(cl *client.Client) int {
		req := &adminpb.ListRegionsRequest{Table: *table, States: *states, Server: *server, PageSize: int32(pf.size)}
		fetch := func(token string) ([]*adminpb.Region, string, error) {
			req.PageToken = token
			r, err := cl.ListRegionsPage(c.ctx, req, rf.opts()...)
			return r.GetRegions(), r.GetNextPageToken(), err
		}
		var cols *columns
		show := func(rs []*adminpb.Region, _ bool) {
			if len(rs) == 0 {
				return
			}
			header := cols == nil
			if header {
				cols = &columns{w: c.stdout}
			}
			cols.print(regionRows(rs, true, header))
		}
		return listPages(e, pf, rf, pagedList[*adminpb.Region]{
			cmd: "region list", noun: "regions", key: "regions",
			fetch: fetch, show: show, tail: c.servedTail(rf, "no regions"),
			toJSON: func(r *adminpb.Region) any { return toRegionJSON(r) },
			pageJSON: func(regions []*adminpb.Region, next string) any {
				return regionsJSON{Regions: toRegionsJSON(regions), NextPageToken: next, Read: toReadJSON(rf.served)}
			},
		})
	})
}

func (c *cli) regionMove(args []string) int {
	e := c.command("region move", "REGION [--to SERVER] [--wait] [--nonce N]", regionAdvice)
	to := e.fs.String("to", "", "the region server to move it to, as 'baton rs list' names it (default: any other live one)")
	wait, nonce := e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "REGION (as 'baton region list' names it)")
	if !ok {
		return code
	}
	what := "move region " + pos[0]
	if *to != "" {
		what += " to " + *to
	}
	return e.start(what, *wait, func(cl *client.Client) (uint64, error) {
		return cl.MoveRegion(c.ctx, pos[0], *to, *nonce)
	})
}

// ---- balance

func init() {
	topLevel.add(topCommand{
		name: "balance", rank: 90, run: (*cli).balance,
		summary: `even out the region counts of the live region servers`,
	})
}

func (c *cli) balance(args []string) int {
	e := c.command("balance", "[--wait] [--nonce N]", balanceAdvice)
	e.fs.Usage = func() {
		fmt.Fprint(e.fs.Output(), "usage: baton balance [--wait] [--nonce N]\n\nmove regions until every live region server holds about as many\n\nflags:\n")
		e.fs.PrintDefaults()
	}
	wait, nonce := e.waitFlag(), e.nonceFlag()
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	return e.start("balance", *wait, func(cl *client.Client) (uint64, error) {
		return cl.Balance(c.ctx, *nonce)
	})
}
