package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/proto/adminpb"
)

const procUsage = `usage: baton proc <command> [flags]

commands:
  submit TYPE [--arg k=v ...] [--nonce N] [--wait]   start a procedure
  get ID [--history]                                show a procedure (--history: its timeline)
  list [--all] [--state S] [--type T]               list procedures (--all: children too)
  wait ID                                           wait until it is terminal
  abort ID | pause ID | resume ID | ack ID          act on a procedure
  cancel [--type T] [--state S] [--owner O] [--older-than D] [--dry-run | --yes]
                                                    abort every unfinished root procedure
                                                    that matches (repair kit)
  bypass ID [--override] [--recursive] --yes        finish a stuck procedure without
                                                    running it further (repair kit)

Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json
and --timeout. Run 'baton proc <command> -h' for its flags.
`

func init() {
	topLevel.add(topCommand{
		name: "proc", rank: 30, run: (*cli).proc,
		summary: `submit, list, watch and control procedures:
submit TYPE [--arg k=v ...] [--nonce N] [--wait], get ID,
list [--all], wait ID, abort ID, pause ID, resume ID, ack ID`,
	})
}

func (c *cli) proc(args []string) int {
	byID := func(verb string) func([]string) int {
		return func(a []string) int { return c.procByID(verb, a) }
	}
	return c.subcommands("proc", procUsage, args, map[string]func([]string) int{
		"submit": c.procSubmit,
		"get":    byID("get"),
		"wait":   byID("wait"),
		"abort":  byID("abort"),
		"pause":  byID("pause"),
		"resume": byID("resume"),
		"ack":    byID("ack"),
		"list":   c.procList,
		"cancel": c.procCancel,
		"bypass": c.procBypass,
	})
}

// argsFlag collects repeated --arg k=v.
type argsFlag map[string]string

func (a argsFlag) String() string { return "" }

func (a argsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	if _, dup := a[k]; dup {
		return fmt.Errorf("%q: argument %q given twice", s, k)
	}
	a[k] = v
	return nil
}

// submitTypesHelp lists the procedure types a submission may name, with
// their arguments, as the diag package describes them.
func submitTypesHelp() string {
	var b strings.Builder
	b.WriteString("\nprocedure types (arguments as --arg name=value):\n")
	for _, d := range diag.Docs() {
		fmt.Fprintf(&b, "  %-8s %s\n", d.Name, d.Summary)
		for _, a := range d.Args {
			fmt.Fprintf(&b, "    %-10s %s (default %s)\n", a.Name, a.Help, a.Default)
		}
	}
	return b.String()
}

// submitJSON is the --json document of a submission without --wait.
type submitJSON struct {
	ID uint64 `json:"id"`
}

func (c *cli) procSubmit(args []string) int {
	const cmd = "proc submit"
	e := c.command(cmd, "TYPE [--arg k=v ...] [--nonce N] [--owner O] [--proc-timeout D] [--wait]", nil)
	fs, cf := e.fs, e.cf
	arguments := argsFlag{}
	fs.Var(arguments, "arg", "a procedure argument key=value (repeatable)")
	nonce := fs.String("nonce", "", "idempotency key: submitting again with it returns the first id (default: a random one)")
	owner := fs.String("owner", "", "who submits (informational)")
	procTimeout := fs.Duration("proc-timeout", 0, "abort the procedure if it has not finished after this long (0: never)")
	wait := fs.Bool("wait", false, "wait until the procedure is terminal; exit 1 if it rolled back")
	flagsUsage := fs.Usage
	fs.Usage = func() {
		flagsUsage()
		fmt.Fprint(fs.Output(), submitTypesHelp())
	}
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 1 {
		return e.fail(usagef("want exactly one procedure TYPE (e.g. sleep, fail, fanout), got %d arguments", len(pos)))
	}
	if *procTimeout < 0 {
		return e.fail(usagef("--proc-timeout %v is negative", *procTimeout))
	}
	return e.withClient(func(cl *client.Client) int {
		id, err := cl.Submit(c.ctx, pos[0], arguments, *nonce, *owner, *procTimeout)
		if err != nil {
			return e.fail(err)
		}
		if !*wait {
			if cf.json {
				c.printJSON(submitJSON{ID: id})
			} else {
				fmt.Fprintf(c.stdout, "submitted %s procedure %d\n", pos[0], id)
			}
			return exitOK
		}
		if !cf.json {
			fmt.Fprintf(c.stdout, "submitted %s procedure %d; waiting\n", pos[0], id)
		}
		return c.waitFor(cmd, fs, cf, cl, id)
	})
}

// waitFor waits until procedure id is terminal and prints it; exit 1 if it
// did not succeed.
func (c *cli) waitFor(cmd string, fs *flag.FlagSet, cf *clientFlags, cl *client.Client, id uint64) int {
	p, code, ok := c.watch(cmd, fs, cf, cl, id)
	if !ok {
		return code
	}
	return c.showFinal(cf, p)
}

func (c *cli) showFinal(cf *clientFlags, p *adminpb.Procedure) int {
	if cf.json {
		c.printJSON(toProcJSON(p))
	} else {
		c.printProc(p)
	}
	if p.GetState() != client.StateSuccess {
		c.printEnded(p)
		return exitFailed
	}
	return exitOK
}

func (c *cli) procByID(verb string, args []string) int {
	cmd := "proc " + verb
	synopsis := "ID"
	e := c.command(cmd, synopsis, nil)
	fs, cf := e.fs, e.cf
	var rf *readFlags
	var history *bool
	var force *bool
	if verb != "get" && verb != "wait" {
		force = fs.Bool("force", false, forceUsage("procedure", "submitted"))
	}
	if verb == "get" {
		rf = addReadFlags(fs)
		history = fs.Bool("history", false, "also print the procedure's timeline: one row per step that persisted its outcome, with the master that wrote it (--json always has it, as history)")
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: baton %s ID [--history] [--stale]\n\nflags:\n", cmd)
			fs.PrintDefaults()
		}
	}
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 1 {
		return e.fail(usagef("want exactly one procedure ID, got %d arguments", len(pos)))
	}
	id, err := parseID(pos[0])
	if err != nil {
		return e.fail(err)
	}
	return e.withClient(func(cl *client.Client) int {
		var p *adminpb.Procedure
		var act []client.ActOption
		if force != nil && *force {
			act = append(act, client.Force())
		}
		switch verb {
		case "wait":
			return c.waitFor(cmd, fs, cf, cl, id)
		case "get":
			p, err = cl.Get(c.ctx, id, rf.opts()...)
		case "abort":
			p, err = cl.Abort(c.ctx, id, act...)
		case "pause":
			p, err = cl.Pause(c.ctx, id, act...)
		case "resume":
			p, err = cl.Resume(c.ctx, id, act...)
		case "ack":
			p, err = cl.Ack(c.ctx, id, act...)
		}
		if err != nil {
			return e.fail(err)
		}
		var children []*adminpb.Procedure
		if verb == "get" && len(p.GetChildren()) > 0 {
			if children, err = childrenOf(c, cl, p, rf); err != nil {
				return e.fail(err)
			}
		}
		if cf.json {
			j := toProcJSON(p)
			if verb == "get" {
				kids := []childJSON{}
				for _, ch := range children {
					kids = append(kids, childJSON{ID: ch.GetId(), Type: ch.GetType(), State: ch.GetState(), WaitingFor: ch.GetWaitingFor(), Error: ch.GetError()})
				}
				j.ChildProcedures = &kids
				hist := toHistoryJSON(p.GetHistory())
				j.History = &hist
			}
			c.printJSON(j)
			return exitOK
		}
		switch verb {
		case "abort":
			fmt.Fprintf(c.stdout, "procedure %d: abort requested; it rolls back ('baton proc wait %d' to follow)\n", id, id)
		case "pause":
			fmt.Fprintf(c.stdout, "procedure %d: paused after its current step\n", id)
		case "resume":
			fmt.Fprintf(c.stdout, "procedure %d: resumed\n", id)
		case "ack":
			fmt.Fprintf(c.stdout, "procedure %d: result acknowledged\n", id)
		}
		if verb == "get" {
			c.printProc(p)
			if *history {
				c.printHistory(p)
			}
			if len(children) > 0 {
				fmt.Fprintln(c.stdout)
				tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CHILD\tTYPE\tSTATE\tNOTE")
				for _, ch := range children {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ch.GetId(), ch.GetType(), ch.GetState(), procNote(ch))
				}
				tw.Flush()
			}
			if n := len(p.GetChildren()) - len(children); n > 0 && p.GetParentId() == 0 && client.Terminal(p.GetState()) {
				fmt.Fprintf(c.stdout, "%d of its children not shown: no summary of them was kept "+
					"(it finished on a version that kept none, or its tree was too big to summarise every member)\n", n)
			}
			c.printServed(p.GetRead())
		}
		return exitOK
	})
}

// childJSON is a child procedure in proc get's --json document.
type childJSON struct {
	ID         uint64 `json:"id"`
	Type       string `json:"type"`
	State      string `json:"state"`
	WaitingFor string `json:"waiting_for,omitempty"`
	Error      string `json:"error,omitempty"`
}

// childrenOf reads p's children with one listing rather than a call each:
// a table create has one per region. A child of a finished tree is listed
// from the summary its root keeps (summary_only); one it keeps none of
// is left out.
func childrenOf(c *cli, cl *client.Client, p *adminpb.Procedure, rf *readFlags) ([]*adminpb.Procedure, error) {
	// A child's id is above its parent's: the listing starts there, and
	// stops once every child is found.
	o := client.ListOptions{PageToken: strconv.FormatUint(p.GetId(), 10)}
	var out []*adminpb.Procedure
	for len(out) < len(p.GetChildren()) {
		page, next, err := cl.List(c.ctx, o, rf.optsQuiet()...)
		if err != nil {
			return nil, fmt.Errorf("listing the children of procedure %d: %w", p.GetId(), err)
		}
		for _, q := range page {
			if q.GetParentId() == p.GetId() {
				out = append(out, q)
			}
		}
		if next == "" || next == o.PageToken {
			break
		}
		o.PageToken = next
	}
	return out, nil
}

// procNote is the NOTE column: the error, else what it waits for.
func procNote(p *adminpb.Procedure) string {
	note := p.GetError()
	if note == "" {
		note = p.GetWaitingFor()
	}
	if p.GetPaused() {
		note = strings.TrimSpace("paused " + note)
	}
	return note
}

// listJSON is the --json document of proc list.
type listJSON struct {
	Procedures []procJSON `json:"procedures"`
	Read       *readJSON  `json:"read,omitempty"`
}

var knownStates = []string{client.StateInitializing, client.StateRunnable, client.StateWaiting, client.StateWaitingTimeout,
	client.StateFailed, client.StateRolledBack, client.StateSuccess}

func (c *cli) procList(args []string) int {
	const cmd = "proc list"
	e := c.command(cmd, "[--all] [--state S] [--type T] [--stale]", nil)
	fs, cf := e.fs, e.cf
	rf := addReadFlags(fs)
	state := fs.String("state", "", "only procedures in this state: "+strings.Join(knownStates, ", "))
	typ := fs.String("type", "", "only procedures of this type")
	all := fs.Bool("all", false, "children too (a table create's region moves, a fanout's sleeps), with their parent's id")
	fs.Bool("roots", true, "only root procedures: the default without --all")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 0 {
		return e.fail(usagef("takes no arguments, got %q", pos))
	}
	*state = strings.ToUpper(*state)
	if *state != "" && !slices.Contains(knownStates, *state) {
		return e.fail(usagef("--state %q: want one of %s", *state, strings.Join(knownStates, ", ")))
	}
	return e.withClient(func(cl *client.Client) int {
		procs, err := cl.ListAll(c.ctx, client.ListOptions{State: *state, Type: *typ, RootsOnly: !*all}, rf.opts()...)
		if err != nil {
			return e.fail(err)
		}
		if cf.json {
			doc := listJSON{Procedures: []procJSON{}, Read: toReadJSON(rf.served)}
			for _, p := range procs {
				doc.Procedures = append(doc.Procedures, toProcJSON(p))
			}
			c.printJSON(doc)
			return exitOK
		}
		if len(procs) == 0 {
			fmt.Fprintln(c.stdout, "no procedures")
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPARENT\tTYPE\tSTATE\tUPDATED\tNOTE")
		for _, p := range procs {
			parent := "-"
			if p.GetParentId() != 0 {
				parent = strconv.FormatUint(p.GetParentId(), 10)
			}
			note := procNote(p)
			updated := "-"
			if ms := p.GetUpdatedUnixMs(); ms != 0 {
				updated = time.UnixMilli(ms).Format("2006-01-02 15:04:05")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.GetId(), parent, p.GetType(), p.GetState(), updated, note)
		}
		tw.Flush()
		c.printServed(rf.served)
		return exitOK
	})
}

// printEnded reports on stderr a procedure that did not succeed, with the
// code of a failed precondition when it has one.
func (c *cli) printEnded(p *adminpb.Procedure) {
	if code := p.GetErrorCode(); code != "" {
		fmt.Fprintf(c.stderr, "procedure %d ended %s (%s): %s\n", p.GetId(), p.GetState(), code, p.GetError())
		return
	}
	fmt.Fprintf(c.stderr, "procedure %d ended %s: %s\n", p.GetId(), p.GetState(), p.GetError())
}

// transitionJSON is one entry of proc get's history: a stretch of the
// procedure's writes that left it at one place (procedure.Transition).
type transitionJSON struct {
	State string `json:"state"`
	// Step is the state a state machine runs next, -1 for other types.
	Step        int32  `json:"step"`
	Depth       int32  `json:"depth"`
	Node        string `json:"node"`
	At          string `json:"at"`
	Until       string `json:"until"`
	Writes      uint32 `json:"writes"`
	Attempt     int32  `json:"attempt"`
	RollingBack bool   `json:"rolling_back"`
}

func toHistoryJSON(h []*adminpb.ProcedureTransition) []transitionJSON {
	out := make([]transitionJSON, 0, len(h))
	for _, t := range h {
		out = append(out, transitionJSON{State: t.GetState(), Step: t.GetStep(), Depth: t.GetDepth(), Node: t.GetNode(),
			At: msTime(t.GetAtUnixMs()), Until: msTime(t.GetUntilUnixMs()), Writes: t.GetWrites(), Attempt: t.GetAttempt(),
			RollingBack: t.GetRollingBack()})
	}
	return out
}

// printHistory prints proc get --history's timeline. Writes are numbered
// as the runs number them, counted back from the last one: a long
// history keeps only its first transition and the latest ones, and the
// gap is said rather than misnumbered.
func (c *cli) printHistory(p *adminpb.Procedure) {
	h := p.GetHistory()
	fmt.Fprintln(c.stdout)
	if len(h) == 0 {
		fmt.Fprintln(c.stdout, "history      none recorded")
		return
	}
	var sum uint32
	for _, t := range h {
		sum += t.GetWrites()
	}
	total := sum
	if runs := p.GetRuns(); len(runs) > 0 && runs[len(runs)-1].GetLastWrite() > total {
		total = runs[len(runs)-1].GetLastWrite()
	}
	first := make([]uint32, len(h)) // each transition's first write
	next := total + 1
	for i := len(h) - 1; i >= 1; i-- {
		next -= h[i].GetWrites()
		first[i] = next
	}
	first[0] = 1
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WRITES\tNODE\tAT\tTOOK\tSTATE\tSTEP\tDEPTH\tNOTE")
	for i, t := range h {
		if i == 1 && first[1] > 1+h[0].GetWrites() {
			fmt.Fprintf(tw, "...\t\t\t\t(writes %d-%d: transitions not kept)\t\t\t\n", 1+h[0].GetWrites(), first[1]-1)
		}
		writes := strconv.FormatUint(uint64(first[i]), 10)
		if n := t.GetWrites(); n > 1 {
			writes += "-" + strconv.FormatUint(uint64(first[i]+n-1), 10)
		}
		took := ""
		if i+1 < len(h) {
			took = (time.Duration(h[i+1].GetAtUnixMs()-t.GetAtUnixMs()) * time.Millisecond).String()
		}
		step := "-"
		if t.GetStep() >= 0 {
			step = strconv.Itoa(int(t.GetStep()))
		}
		var notes []string
		if t.GetRollingBack() {
			notes = append(notes, "rolling back")
		}
		if a := t.GetAttempt(); a > 1 {
			notes = append(notes, fmt.Sprintf("attempt %d", a))
		}
		if i > 0 && t.GetNode() != h[i-1].GetNode() {
			notes = append(notes, "now on "+t.GetNode())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", writes, t.GetNode(), msTime(t.GetAtUnixMs()), took, t.GetState(), step, t.GetDepth(), strings.Join(notes, ", "))
	}
	tw.Flush()
}
