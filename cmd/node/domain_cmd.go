package main

// The client commands of the cluster's domain: namespaces, tables, regions
// and balancing (this file), region servers (rs_cmd.go) and external locks
// (lock_cmd.go). Commands that change something start a procedure on the
// leader and print its id; with --wait they follow it to its end and exit 1
// if it rolled back.

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/adminpb"
	"github.com/baton-dev/baton/cluster/client"
)

// command is one client command being run: its flags and the advice its
// failures get.
type command struct {
	c      *cli
	name   string // e.g. "table create"
	fs     *flag.FlagSet
	cf     *clientFlags
	advise map[codes.Code]string
}

func (c *cli) command(name, synopsis string, advise map[codes.Code]string) *command {
	fs, cf := c.newFlagSet(name, synopsis)
	return &command{c: c, name: name, fs: fs, cf: cf, advise: advise}
}

// parse parses args and checks that want positional arguments came (what
// names them in the error). ok is false when the command is over, with
// exit code code.
func (e *command) parse(args []string, want int, what string) (pos []string, code int, ok bool) {
	pos, err := parse(e.fs, args)
	if err != nil {
		return nil, parseFailed(err), false
	}
	if len(pos) != want {
		if want == 0 {
			return nil, e.fail(usagef("takes no arguments, got %q", pos)), false
		}
		return nil, e.fail(usagef("want exactly one %s, got %d arguments", what, len(pos))), false
	}
	for _, p := range pos {
		if strings.TrimSpace(p) == "" {
			return nil, e.fail(usagef("%s is empty", what)), false
		}
	}
	return pos, exitOK, true
}

// fail reports err and returns the exit code (see cli.finish).
func (e *command) fail(err error) int { return e.c.finishWith(e.name, e.fs, e.cf, err, e.advise) }

func (e *command) client() (*client.Client, error) { return e.cf.client() }

// nonceFlag adds --nonce to a command that starts something.
func (e *command) nonceFlag() *string {
	return e.fs.String("nonce", "", "idempotency key: running the command again with it returns the first id instead of starting again (default: a random one)")
}

// waitFlag adds --wait to a command that starts a procedure.
func (e *command) waitFlag() *bool {
	return e.fs.Bool("wait", false, "wait until the procedure is terminal; exit 1 if it rolled back")
}

// Advice for the codes whose default advice (cli.finish) is about
// procedures.
var (
	invalidAdvice = "the cluster refused the request as invalid: check the names and flags"
	nsAdvice      = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the namespaces with 'node ns list'",
		codes.FailedPrecondition: "the namespace's state does not allow this: only an empty namespace can be deleted ('node table list --namespace NS')",
	}
	tableAdvice = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the tables with 'node table list' (a table is NAME or NS:NAME, or NAME with --namespace NS)",
		codes.FailedPrecondition: "the table's state does not allow this: see it with 'node table describe NAME'",
	}
	regionAdvice = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the regions with 'node region list' and the region servers with 'node rs list'",
		codes.FailedPrecondition: "the region's or the server's state does not allow this: see 'node region list' and 'node rs list'",
	}
	balanceAdvice = map[codes.Code]string{
		codes.FailedPrecondition: "the cluster cannot balance now: see 'node rs list' and 'node region list'",
	}
)

// startedJSON is the --json document of a command that started a
// procedure: id and proc_id are both its id (id as 'node proc submit'
// prints it, proc_id unambiguous beside other ids). With --wait it also
// holds the final state, its error, and the whole procedure.
type startedJSON struct {
	ID     uint64 `json:"id"`
	ProcID uint64 `json:"proc_id"`
	State  string `json:"state,omitempty"`
	Error  string `json:"error,omitempty"`
	// Code classifies a failed precondition (ALREADY_EXISTS, NOT_FOUND,
	// FAILED_PRECONDITION), as the code of an error document does.
	Code      string    `json:"code,omitempty"`
	ExitCode  int       `json:"exit_code,omitempty"`
	Procedure *procJSON `json:"procedure,omitempty"`
}

// started reports procedure id, which the command started to do what
// says ("create table default:t1"), and with wait follows it to its end:
// exit 1 unless it succeeded. Id 0 means the cluster found nothing to do.
func (e *command) started(cl *client.Client, what string, id uint64, wait bool) int {
	c := e.c
	if id == 0 {
		if e.cf.json {
			c.printJSON(startedJSON{})
		} else {
			fmt.Fprintf(c.stdout, "%s: nothing to do\n", what)
		}
		return exitOK
	}
	if !wait {
		if e.cf.json {
			c.printJSON(startedJSON{ID: id, ProcID: id})
		} else {
			fmt.Fprintf(c.stdout, "%s: procedure %d started ('node proc wait %d' to follow)\n", what, id, id)
		}
		return exitOK
	}
	if !e.cf.json {
		fmt.Fprintf(c.stdout, "%s: procedure %d started; waiting\n", what, id)
	}
	var last string
	p, err := cl.Watch(c.ctx, id, func(p *adminpb.Procedure) error {
		if !e.cf.json && p.GetState() != last && !client.Terminal(p.GetState()) {
			fmt.Fprintf(c.stdout, "  %s %s\n", time.Now().Format("15:04:05.000"), p.GetState())
		}
		last = p.GetState()
		return nil
	})
	if err != nil {
		// About the procedure, not the table or region: the default advice.
		return c.finish(e.name, e.fs, e.cf, err)
	}
	if e.cf.json {
		pj := toProcJSON(p)
		doc := startedJSON{ID: id, ProcID: id, State: p.GetState(), Error: p.GetError(), Code: p.GetErrorCode(), Procedure: &pj}
		if p.GetState() != client.StateSuccess {
			doc.ExitCode = exitFailed
		}
		c.printJSON(doc)
	}
	if p.GetState() != client.StateSuccess {
		c.printEnded(p)
		return exitFailed
	}
	if !e.cf.json {
		fmt.Fprintf(c.stdout, "%s: done (procedure %d %s)\n", what, id, p.GetState())
	}
	return exitOK
}

// subcommands dispatches args[0] of group ("node table ...") to its
// command, or prints the group's usage.
func (c *cli) subcommands(group, usage string, args []string, cmds map[string]func([]string) int) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitUsage
	}
	if run, ok := cmds[args[0]]; ok {
		return run(args[1:])
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, usage)
		return exitOK
	}
	fmt.Fprintf(c.stderr, "node %s: unknown command %q\n\n%s", group, args[0], usage)
	return exitUsage
}

const clientFlagsNote = `
Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json
and --timeout. Run 'node %s <command> -h' for its flags.
`

// ---- namespaces

var nsUsage = `usage: node ns <command> [flags]

commands:
  create NAME [--wait]   create a namespace
  delete NAME [--wait]   delete a namespace (it must hold no tables)
  get NAME [--stale]     show one namespace (exit 1, NOT_FOUND, if there is none)
  list [--stale]         list the namespaces

Reads are linearizable: they reflect every write acknowledged before them.
--stale lets the first node reached answer from its own state, which may
lag; every read says on stderr (and in --json under "read") which node
served it, at which applied index and consistency.
` + fmt.Sprintf(clientFlagsNote, "ns")

func (c *cli) ns(args []string) int {
	return c.subcommands("ns", nsUsage, args, map[string]func([]string) int{
		"create": func(a []string) int { return c.nsChange("create", a) },
		"delete": func(a []string) int { return c.nsChange("delete", a) },
		"get":    c.nsGet,
		"list":   c.nsList,
	})
}

func (c *cli) nsChange(verb string, args []string) int {
	e := c.command("ns "+verb, "NAME [--wait] [--nonce N]", nsAdvice)
	wait, nonce := e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "namespace NAME")
	if !ok {
		return code
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	start := cl.CreateNamespace
	if verb == "delete" {
		start = cl.DeleteNamespace
	}
	id, err := start(c.ctx, pos[0], *nonce)
	if err != nil {
		return e.fail(err)
	}
	return e.started(cl, verb+" namespace "+pos[0], id, *wait)
}

// namespacesJSON is the --json document of ns list.
type namespacesJSON struct {
	Namespaces []string  `json:"namespaces"`
	Read       *readJSON `json:"read,omitempty"`
}

func (c *cli) nsList(args []string) int {
	e := c.command("ns list", "[--stale]", nsAdvice)
	rf := addReadFlags(e.fs)
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	names, err := cl.ListNamespaces(c.ctx, rf.opts()...)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(namespacesJSON{Namespaces: append([]string{}, names...), Read: toReadJSON(rf.served)})
		return exitOK
	}
	for _, n := range names {
		fmt.Fprintln(c.stdout, n)
	}
	c.printServed(rf.served)
	return exitOK
}

// namespaceJSON is the --json document of ns get.
type namespaceJSON struct {
	Name string    `json:"name"`
	Read *readJSON `json:"read,omitempty"`
}

func (c *cli) nsGet(args []string) int {
	e := c.command("ns get", "NAME [--stale]", nsAdvice)
	rf := addReadFlags(e.fs)
	pos, code, ok := e.parse(args, 1, "namespace NAME")
	if !ok {
		return code
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	ns, err := cl.GetNamespace(c.ctx, pos[0], rf.opts()...)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(namespaceJSON{Name: ns.GetName(), Read: toReadJSON(ns.GetRead())})
		return exitOK
	}
	fmt.Fprintln(c.stdout, ns.GetName())
	c.printServed(ns.GetRead())
	return exitOK
}

// ---- tables

var tableUsage = `usage: node table <command> [flags]

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
		"delete":   func(a []string) int { return c.tableChange("delete", a) },
		"disable":  func(a []string) int { return c.tableChange("disable", a) },
		"enable":   func(a []string) int { return c.tableChange("enable", a) },
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
	return ns, name, nil
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
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	id, err := cl.CreateTable(c.ctx, ns, name, *regions, *nonce)
	if err != nil {
		return e.fail(err)
	}
	return e.started(cl, fmt.Sprintf("create table %s:%s (%s)", ns, name, regionsN(*regions)), id, *wait)
}

func (c *cli) tableChange(verb string, args []string) int {
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
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	start := map[string]func(*client.Client) (uint64, error){
		"delete":  func(cl *client.Client) (uint64, error) { return cl.DeleteTable(c.ctx, ns, name, *nonce) },
		"disable": func(cl *client.Client) (uint64, error) { return cl.DisableTable(c.ctx, ns, name, *nonce) },
		"enable":  func(cl *client.Client) (uint64, error) { return cl.EnableTable(c.ctx, ns, name, *nonce) },
	}[verb]
	id, err := start(cl)
	if err != nil {
		return e.fail(err)
	}
	return e.started(cl, fmt.Sprintf("%s table %s:%s", verb, ns, name), id, *wait)
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
	Read      *readJSON    `json:"read,omitempty"`
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
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	t, err := cl.DescribeTable(c.ctx, ns, name, rf.opts()...)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(toTableJSON(t))
		return exitOK
	}
	fmt.Fprintf(c.stdout, "table    %s:%s\n", t.GetNamespace(), t.GetName())
	fmt.Fprintf(c.stdout, "state    %s\n", t.GetState())
	fmt.Fprintf(c.stdout, "regions  %s\n", regionSummary(t.GetRegions()))
	if len(t.GetRegions()) > 0 {
		fmt.Fprintln(c.stdout)
		c.printRegions(t.GetRegions(), false)
	}
	c.printServed(t.GetRead())
	return exitOK
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
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	tables, err := cl.ListTables(c.ctx, *ns, rf.opts()...)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		doc := tablesJSON{Tables: []tableJSON{}, Read: toReadJSON(rf.served)}
		for _, t := range tables {
			doc.Tables = append(doc.Tables, toTableJSON(t))
		}
		c.printJSON(doc)
		return exitOK
	}
	if len(tables) == 0 {
		fmt.Fprintln(c.stdout, "no tables")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATE\tREGIONS")
	for _, t := range tables {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.GetNamespace(), t.GetName(), t.GetState(), regionSummary(t.GetRegions()))
	}
	tw.Flush()
	c.printServed(rf.served)
	return exitOK
}

// ---- regions

var regionUsage = `usage: node region <command> [flags]

commands:
  list [--table T]                   list the regions (of one table: NAME or NS:NAME)
  move REGION [--to SERVER] [--wait] move a region to a region server
                                     (without --to: any other live one)
` + fmt.Sprintf(clientFlagsNote, "region")

func (c *cli) region(args []string) int {
	return c.subcommands("region", regionUsage, args, map[string]func([]string) int{
		"list": c.regionList,
		"move": c.regionMove,
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
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	regions, err := cl.ListRegions(c.ctx, *table, rf.opts()...)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(regionsJSON{Regions: toRegionsJSON(regions), Read: toReadJSON(rf.served)})
		return exitOK
	}
	if len(regions) == 0 {
		fmt.Fprintln(c.stdout, "no regions")
		return exitOK
	}
	c.printRegions(regions, true)
	c.printServed(rf.served)
	return exitOK
}

func (c *cli) regionMove(args []string) int {
	e := c.command("region move", "REGION [--to SERVER] [--wait] [--nonce N]", regionAdvice)
	to := e.fs.String("to", "", "the region server to move it to, as 'node rs list' names it (default: any other live one)")
	wait, nonce := e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "REGION (as 'node region list' names it)")
	if !ok {
		return code
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	id, err := cl.MoveRegion(c.ctx, pos[0], *to, *nonce)
	if err != nil {
		return e.fail(err)
	}
	what := "move region " + pos[0]
	if *to != "" {
		what += " to " + *to
	}
	return e.started(cl, what, id, *wait)
}

// ---- balance

func (c *cli) balance(args []string) int {
	e := c.command("balance", "[--wait] [--nonce N]", balanceAdvice)
	e.fs.Usage = func() {
		fmt.Fprint(c.stderr, "usage: node balance [--wait] [--nonce N]\n\nmove regions until every live region server holds about as many\n\nflags:\n")
		e.fs.PrintDefaults()
	}
	wait, nonce := e.waitFlag(), e.nonceFlag()
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	id, err := cl.Balance(c.ctx, *nonce)
	if err != nil {
		return e.fail(err)
	}
	return e.started(cl, "balance", id, *wait)
}
