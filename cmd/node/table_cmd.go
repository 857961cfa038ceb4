package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/grpc/status"

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
  describe NAME [--namespace NS] [--stale]              show a table and its regions
  list [--namespace NS] [--stale]                       list the tables

NAME may also be NS:NAME. Without a namespace, a table is in "default".
` + fmt.Sprintf(clientFlagsNote, "table")

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
	pos, code, ok := e.parse(args, 1, "table NAME")
	if !ok {
		return code
	}
	ns, name, err := splitTable(pos[0], *nsFlag)
	if err != nil {
		return e.fail(err)
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
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	State     string       `json:"state"`
	Regions   []regionJSON `json:"regions"`
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

// countRegions counts regions by state; a region on a server whose lease
// state in servers is not live or suspect counts as offline on a dead
// server, since its recorded state (OPEN) says what the masters last
// decided, not that anyone serves it. servers nil: the servers are
// unknown, and every region counts by its recorded state.
func countRegions(rs []*adminpb.Region, servers map[string]string) map[string]int {
	counts := map[string]int{"open": 0, "opening": 0, "closing": 0}
	if servers != nil {
		counts[offlineOnDeadKey] = 0
	}
	for _, r := range rs {
		if srv := r.GetServer(); servers != nil && srv != "" {
			if st := servers[srv]; st != client.LeaseLive && st != client.LeaseSuspect {
				counts[offlineOnDeadKey]++
				continue
			}
		}
		counts[strings.ToLower(r.GetState())]++
	}
	return counts
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
		out = append(out, regionJSON{Name: r.GetName(), Table: r.GetTable(), State: r.GetState(), Server: r.GetServer(), ProcID: r.GetProcId()})
	}
	return out
}

func toTableJSON(t *adminpb.Table) tableJSON {
	return tableJSON{Namespace: t.GetNamespace(), Name: t.GetName(), State: t.GetState(), Regions: toRegionsJSON(t.GetRegions()), Read: toReadJSON(t.GetRead())}
}

func (c *cli) tableDescribe(args []string) int {
	e := c.command("table describe", "NAME [--namespace NS] [--stale]", tableAdvice)
	nsFlag := e.namespaceFlag()
	rf := addReadFlags(e.fs)
	pos, code, ok := e.parse(args, 1, "table NAME")
	if !ok {
		return code
	}
	ns, name, err := splitTable(pos[0], *nsFlag)
	if err != nil {
		return e.fail(err)
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		t, err := cl.DescribeTable(c.ctx, ns, name, rf.opts()...)
		return toTableJSON(t), func() {
			fmt.Fprintf(c.stdout, "table    %s:%s\n", t.GetNamespace(), t.GetName())
			fmt.Fprintf(c.stdout, "state    %s\n", t.GetState())
			fmt.Fprintf(c.stdout, "regions  %s\n", regionSummary(t.GetRegions()))
			if len(t.GetRegions()) > 0 {
				fmt.Fprintln(c.stdout)
				c.printRegions(t.GetRegions(), false)
			}
			c.printServed(t.GetRead())
		}, err
	})
}

// regionSummary counts regions by state: "4 (3 OPEN, 1 OPENING)".
func regionSummary(rs []*adminpb.Region) string {
	if len(rs) == 0 {
		return "0"
	}
	by := map[string]int{}
	for _, r := range rs {
		by[r.GetState()]++
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
	return fmt.Sprintf("%d (%s)", len(rs), strings.Join(parts, ", "))
}

// tablesJSON is the --json document of table list.
type tablesJSON struct {
	Tables []tableJSON `json:"tables"`
	Read   *readJSON   `json:"read,omitempty"`
}

func (c *cli) tableList(args []string) int {
	e := c.command("table list", "[--namespace NS] [--stale]", tableAdvice)
	ns := e.fs.String("namespace", "", "only the tables of this namespace (default: every namespace)")
	rf := addReadFlags(e.fs)
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	if *ns != "" {
		if err := checkName("namespace", *ns); err != nil {
			return e.fail(err)
		}
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		tables, err := cl.ListTables(c.ctx, *ns, rf.opts()...)
		if err != nil {
			return nil, nil, err
		}
		// The servers' lease states come from the leader only; without
		// them (no leader, with --stale) regions count by recorded state,
		// and the output says so.
		var servers map[string]string
		var serversErr error
		if len(tables) > 0 {
			var ss []*adminpb.Server
			if ss, serversErr = cl.ListServers(c.ctx); serversErr == nil {
				servers = map[string]string{}
				for _, s := range ss {
					servers[s.GetId()] = s.GetLeaseState()
				}
			}
		}
		doc := tablesJSON{Tables: []tableJSON{}, Read: toReadJSON(rf.served)}
		counts := make([]map[string]int, len(tables))
		for i, t := range tables {
			j := toTableJSON(t)
			counts[i] = countRegions(t.GetRegions(), servers)
			j.RegionCounts = counts[i]
			doc.Tables = append(doc.Tables, j)
		}
		return doc, func() {
			if len(tables) == 0 {
				fmt.Fprintln(c.stdout, "no tables")
				return
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATE\tREGIONS")
			for i, t := range tables {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.GetNamespace(), t.GetName(), t.GetState(), countsSummary(len(t.GetRegions()), counts[i]))
			}
			tw.Flush()
			if serversErr != nil {
				fmt.Fprintf(c.stderr, "(region servers unknown, regions counted by recorded state: %s)\n", status.Convert(serversErr).Message())
			}
			c.printServed(rf.served)
		}, err
	})
}

// ---- regions

var regionUsage = `usage: baton region <command> [flags]

commands:
  list [--table T]                   list the regions (of one table: NAME or NS:NAME)
  move REGION [--to SERVER] [--wait] move a region to a region server
                                     (without --to: any other live one)
  assign REGION [--server S] [--override --yes] [--wait]
                                     open a closed region (repair kit); a region
                                     in transition or locked needs --override
  unassign REGION [--override] --yes [--wait]
                                     close a region (repair kit), the same way;
                                     it takes the region offline, so it needs --yes
` + fmt.Sprintf(clientFlagsNote, "region")

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
	Regions []regionJSON `json:"regions"`
	Read    *readJSON    `json:"read,omitempty"`
}

// printRegions prints regions as a table; withTable adds their table's
// column.
func (c *cli) printRegions(rs []*adminpb.Region, withTable bool) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if withTable {
		fmt.Fprint(tw, "TABLE\t")
	}
	fmt.Fprintln(tw, "REGION\tSTATE\tSERVER\tPROC")
	for _, r := range rs {
		if withTable {
			fmt.Fprintf(tw, "%s\t", r.GetTable())
		}
		server, proc := r.GetServer(), "-"
		if server == "" {
			server = "-"
		}
		if r.GetProcId() != 0 {
			proc = strconv.FormatUint(r.GetProcId(), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.GetName(), r.GetState(), server, proc)
	}
	tw.Flush()
}

func (c *cli) regionList(args []string) int {
	e := c.command("region list", "[--table T] [--stale]", regionAdvice)
	table := e.fs.String("table", "", "only the regions of this table, NAME or NS:NAME (default: every table)")
	rf := addReadFlags(e.fs)
	if _, code, ok := e.parse(args, 0, ""); !ok {
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
	return e.read(func(cl *client.Client) (any, func(), error) {
		regions, err := cl.ListRegions(c.ctx, *table, rf.opts()...)
		return regionsJSON{Regions: toRegionsJSON(regions), Read: toReadJSON(rf.served)}, func() {
			if len(regions) == 0 {
				fmt.Fprintln(c.stdout, "no regions")
				return
			}
			c.printRegions(regions, true)
			c.printServed(rf.served)
		}, err
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
