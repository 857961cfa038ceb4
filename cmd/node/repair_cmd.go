package main

// The repair kit's commands: region assign|unassign, rs recover, proc
// cancel|bypass, cluster maintenance, cluster repairs. The masters plan,
// guard and record every call (admin.proto, "Repair kit"); the CLI adds
// the confirmation.
//
// Confirmation: a command that can take work away from the cluster or
// override its judgement needs --yes: region assign with --override,
// region unassign, rs recover, proc cancel, proc bypass and cluster
// maintenance on. Without it the command asks the leader for a dry run,
// prints what it would do ("dry run: ..."; --json: the dry run's
// document with "confirm"), says "add --yes to do it" on stderr and exits
// 2, having done nothing; a refusal is reported as the real call's would
// be. A proc cancel that matches nothing has nothing to confirm: it says
// so and exits 0. Unassign needs it even without --override: the only region it then
// acts on is one recorded OPEN (in transition or locked is refused,
// closed is left alone), and closing that takes it offline for good,
// which the cluster never does by itself; an unassign with nothing to do
// says so in its dry run. The commands that only do what the cluster
// would do by itself (assign without --override, maintenance off) need no
// --yes. Nothing is ever asked interactively, so scripts and terminals
// behave alike.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The repair kit is no command of its own: the main usage lists its
// commands and their confirmation between the client commands and demo.
func init() {
	topLevel.note(120, `  repair kit: region assign|unassign [--override], rs recover, proc cancel,
          proc bypass, cluster maintenance, cluster repairs; the commands
          that override the cluster or take a region offline need --yes
          (without it: what they would do, exit 2)
`)
}

// confirmHint is what a destructive command without --yes says.
const confirmHint = "add --yes to do it"

// repairAdvice is the advice of the repair commands' failures.
var repairAdvice = map[codes.Code]string{
	codes.InvalidArgument:    invalidAdvice,
	codes.NotFound:           "list the regions with 'baton region list', the region servers with 'baton rs list' and the procedures with 'baton proc list --all'",
	codes.FailedPrecondition: "nothing was done; the message says what stands in the way and what to do",
}

// yesFlag adds --yes to a command that needs confirmation.
func (e *command) yesFlag() *bool {
	return e.fs.Bool("yes", false, "do it; without --yes the command asks the leader what it would do, prints that and exits 2 ("+confirmHint+")")
}

// repairOptions names this invocation in the repair records: user@host:pid,
// as lock holders are named.
func (c *cli) repairOptions(override, dryRun bool) client.RepairOptions {
	return client.RepairOptions{Caller: c.defaultHolder(), Override: override, DryRun: dryRun}
}

// maintenanceJSON is maintenance mode in a --json document.
type maintenanceJSON struct {
	On     bool      `json:"on"`
	Since  string    `json:"since,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Read   *readJSON `json:"read,omitempty"`
}

func toMaintenanceJSON(m *adminpb.Maintenance) *maintenanceJSON {
	if m == nil {
		return nil
	}
	return &maintenanceJSON{On: m.GetOn(), Since: msTime(m.GetSinceUnixMs()), By: m.GetBy(), Reason: m.GetReason(), Read: toReadJSON(m.GetRead())}
}

// describeMaintenance is the human form: "on since ... by ...: reason".
func describeMaintenance(m *adminpb.Maintenance) string {
	word := "off"
	if m.GetOn() {
		word = "on"
	}
	if m.GetSinceUnixMs() == 0 {
		return word
	}
	s := fmt.Sprintf("%s since %s", word, msTime(m.GetSinceUnixMs()))
	if m.GetBy() != "" {
		s += " by " + m.GetBy()
	}
	if m.GetReason() != "" {
		s += ": " + m.GetReason()
	}
	return s
}

// repairJSON is the --json document of a repair command. proc_id is the
// first of proc_ids (0 if none), as commands that start one procedure
// name it. Without --yes, confirm and exit_code say that nothing was done.
type repairJSON struct {
	DryRun      bool             `json:"dry_run"`
	Summary     string           `json:"summary"`
	ProcID      uint64           `json:"proc_id"`
	ProcIDs     []uint64         `json:"proc_ids"`
	Bypassed    []uint64         `json:"bypassed"`
	Record      uint64           `json:"record"`
	Maintenance *maintenanceJSON `json:"maintenance,omitempty"`
	Confirm     string           `json:"confirm,omitempty"`
	// With --wait: SUCCESS if every procedure succeeded, else the state
	// of the first that did not; and the procedures as they ended.
	State      string     `json:"state,omitempty"`
	Procedures []procJSON `json:"procedures,omitempty"`
	ExitCode   int        `json:"exit_code,omitempty"`
}

func toRepairJSON(r *adminpb.RepairResponse) repairJSON {
	j := repairJSON{DryRun: r.GetDryRun(), Summary: r.GetSummary(), ProcIDs: r.GetProcIds(), Bypassed: r.GetBypassed(),
		Record: r.GetRecord(), Maintenance: toMaintenanceJSON(r.GetMaintenance())}
	if j.ProcIDs == nil {
		j.ProcIDs = []uint64{}
	}
	if j.Bypassed == nil {
		j.Bypassed = []uint64{}
	}
	if len(j.ProcIDs) > 0 {
		j.ProcID = j.ProcIDs[0]
	}
	return j
}

// unconfirmed reports a dry run made for want of --yes: exit 2.
func (e *command) unconfirmed(doc any, summary string) int {
	if e.cf.json {
		e.c.printJSON(doc)
	} else {
		fmt.Fprintf(e.c.stdout, "dry run: %s\n", summary)
	}
	fmt.Fprintf(e.c.stderr, "baton %s: nothing done: %s\n", e.name, confirmHint)
	return exitUsage
}

// repair runs a repair call that answers a RepairResponse: a dry run
// unless confirmed (see the file comment), and with wait it follows the
// procedures the call started.
func (e *command) repair(confirmed, wait bool, call func(cl *client.Client, dryRun bool) (*adminpb.RepairResponse, error)) int {
	return e.withClient(func(cl *client.Client) int {
		r, err := call(cl, !confirmed)
		if err != nil {
			return e.fail(err)
		}
		doc := toRepairJSON(r)
		if !confirmed {
			doc.Confirm, doc.ExitCode = confirmHint, exitUsage
			return e.unconfirmed(doc, r.GetSummary())
		}
		if !e.cf.json {
			fmt.Fprintf(e.c.stdout, "done: %s\n", r.GetSummary())
			if len(r.GetBypassed()) > 0 {
				fmt.Fprintf(e.c.stdout, "bypassed: %s\n", joinIDs(r.GetBypassed()))
			}
			fmt.Fprintf(e.c.stdout, "(repair record %d: 'baton cluster repairs')\n", r.GetRecord())
		}
		code := exitOK
		if wait {
			for _, id := range r.GetProcIds() {
				if !e.cf.json {
					fmt.Fprintf(e.c.stdout, "waiting for procedure %d\n", id)
				}
				p, c, ok := e.c.watch(e.name, e.fs, e.cf, cl, id)
				if !ok {
					return c
				}
				doc.Procedures = append(doc.Procedures, toProcJSON(p))
				if p.GetState() != client.StateSuccess {
					if doc.State == "" {
						doc.State = p.GetState()
					}
					e.c.printEnded(p)
					code = exitFailed
				} else if !e.cf.json {
					fmt.Fprintf(e.c.stdout, "procedure %d %s\n", id, p.GetState())
				}
			}
			if doc.State == "" && len(doc.Procedures) > 0 {
				doc.State = client.StateSuccess
			}
			doc.ExitCode = code
		} else if len(r.GetProcIds()) > 0 && !e.cf.json {
			fmt.Fprintf(e.c.stdout, "('baton proc wait %d' to follow)\n", r.GetProcIds()[0])
		}
		if e.cf.json {
			e.c.printJSON(doc)
		}
		return code
	})
}

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// ---- region assign, unassign

func (c *cli) regionAssign(args []string) int {
	e := c.command("region assign", "REGION [--server S] [--override --yes] [--wait] [--nonce N]", repairAdvice)
	server := e.fs.String("server", "", "the live region server to open it on, as 'baton rs list' names it (default: the master picks one)")
	override := e.fs.Bool("override", false, "take over a region in transition or locked: its own procedure is bypassed, and a new one closes the region wherever it may be open before opening it (needs --yes)")
	yes, wait, nonce := e.yesFlag(), e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "REGION (as 'baton region list' names it)")
	if !ok {
		return code
	}
	return e.repair(!*override || *yes, *wait, func(cl *client.Client, dry bool) (*adminpb.RepairResponse, error) {
		return cl.AssignRegion(c.ctx, pos[0], strings.TrimSpace(*server), *nonce, c.repairOptions(*override, dry))
	})
}

func (c *cli) regionUnassign(args []string) int {
	e := c.command("region unassign", "REGION [--override] --yes [--wait] [--nonce N]", repairAdvice)
	override := e.fs.Bool("override", false, "take over a region in transition or locked: its own procedure is bypassed, and a new one closes the region")
	yes, wait, nonce := e.yesFlag(), e.waitFlag(), e.nonceFlag()
	pos, code, ok := e.parse(args, 1, "REGION (as 'baton region list' names it)")
	if !ok {
		return code
	}
	// Always confirmed: what it closes is serving (see the file comment).
	return e.repair(*yes, *wait, func(cl *client.Client, dry bool) (*adminpb.RepairResponse, error) {
		return cl.UnassignRegion(c.ctx, pos[0], *nonce, c.repairOptions(*override, dry))
	})
}

// ---- rs recover

func (c *cli) rsRecover(args []string) int {
	e := c.command("rs recover", "SERVER [--override] --yes [--wait]", repairAdvice)
	override := e.fs.Bool("override", false, "recover a live server too: it is expired first (fenced and told to drop its regions), and its regions move once it has provably stopped serving them")
	yes, wait := e.yesFlag(), e.waitFlag()
	pos, code, ok := e.parse(args, 1, "region SERVER (as 'baton rs list' names it)")
	if !ok {
		return code
	}
	return e.repair(*yes, *wait, func(cl *client.Client, dry bool) (*adminpb.RepairResponse, error) {
		return cl.RecoverServer(c.ctx, pos[0], c.repairOptions(*override, dry))
	})
}

// ---- proc cancel, bypass

// cancelStates are the states proc cancel filters on.
var cancelStates = []string{client.StateInitializing, client.StateRunnable, client.StateWaiting, client.StateWaitingTimeout}

// cancelJSON is the --json document of proc cancel.
type cancelJSON struct {
	DryRun    bool          `json:"dry_run"`
	Cancelled []procJSON    `json:"cancelled"`
	Skipped   []skippedJSON `json:"skipped"`
	Record    uint64        `json:"record"`
	// Truncated: more matched than the answer lists; the counts count
	// them all.
	Truncated      bool   `json:"truncated,omitempty"`
	CancelledCount int64  `json:"cancelled_count"`
	SkippedCount   int64  `json:"skipped_count"`
	Confirm        string `json:"confirm,omitempty"`
	ExitCode       int    `json:"exit_code,omitempty"`
}

type skippedJSON struct {
	procJSON
	Reason string `json:"reason"`
}

func (c *cli) procCancel(args []string) int {
	e := c.command("proc cancel", "[--type T] [--state S] [--owner O] [--older-than D] (at least one) [--max-id N] [--dry-run | --yes]", repairAdvice)
	typ := e.fs.String("type", "", "only procedures of this type")
	state := e.fs.String("state", "", "only procedures in this state: "+strings.Join(cancelStates, ", "))
	owner := e.fs.String("owner", "", "only procedures submitted by this owner")
	olderThan := e.fs.Duration("older-than", 0, "only procedures submitted at least this long ago (the leader's clock)")
	maxID := e.fs.Uint64("max-id", 0, "only procedures whose id is at most N: give the highest id the dry run listed, and --yes cancels none submitted since")
	dry := e.fs.Bool("dry-run", false, "list what would be cancelled, and exit 0")
	yes := e.yesFlag()
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	*state = strings.ToUpper(strings.TrimSpace(*state))
	switch {
	case *state != "" && !slices.Contains(cancelStates, *state):
		return e.fail(usagef("--state %q: want one of %s (finished procedures cannot be cancelled, and a FAILED one is rolling back already)", *state, strings.Join(cancelStates, ", ")))
	case *olderThan < 0:
		return e.fail(usagef("--older-than %v is negative", *olderThan))
	case *typ == "" && *state == "" && *owner == "" && *olderThan == 0:
		return e.fail(usagef("give at least one filter: --type, --state, --owner or --older-than"))
	case *dry && *yes:
		return e.fail(usagef("--dry-run and --yes contradict each other: give one"))
	}
	return e.withClient(func(cl *client.Client) int {
		f := client.CancelFilter{Type: *typ, State: *state, Owner: *owner, OlderThan: *olderThan, MaxID: *maxID}
		r, err := cl.CancelProcedures(c.ctx, f, c.repairOptions(false, !*yes))
		if err != nil {
			return e.fail(err)
		}
		doc := cancelJSON{DryRun: r.GetDryRun(), Cancelled: []procJSON{}, Skipped: []skippedJSON{}, Record: r.GetRecord(), Truncated: r.GetTruncated()}
		doc.CancelledCount, doc.SkippedCount = cancelCounts(r)
		for _, p := range r.GetCancelled() {
			doc.Cancelled = append(doc.Cancelled, toProcJSON(p))
		}
		for _, s := range r.GetSkipped() {
			doc.Skipped = append(doc.Skipped, skippedJSON{procJSON: toProcJSON(s.GetProcedure()), Reason: s.GetReason()})
		}
		code := exitOK
		nothing := doc.CancelledCount == 0 && doc.SkippedCount == 0
		switch {
		case !*yes && !*dry && !nothing: // with nothing matching, there is nothing to confirm
			doc.Confirm, code = confirmHint, exitUsage
		case *yes && doc.SkippedCount > 0:
			code = exitFailed // not everything that matched is cancelled
		}
		doc.ExitCode = code
		if e.cf.json {
			c.printJSON(doc)
		} else {
			c.printCancel(r, *yes)
		}
		switch {
		case code == exitUsage:
			fmt.Fprintf(c.stderr, "baton %s: nothing done: %s\n", e.name, confirmHint)
		case code == exitFailed:
			fmt.Fprintf(c.stderr, "baton %s: %d matching procedures could not be cancelled (see above)\n", e.name, doc.SkippedCount)
		}
		return code
	})
}

func (c *cli) printCancel(r *adminpb.CancelProceduresResponse, done bool) {
	verb := "would cancel"
	if done {
		verb = "cancelled"
	}
	cancelled, skipped := r.GetCancelled(), r.GetSkipped()
	nc, ns := cancelCounts(r)
	if nc == 0 && ns == 0 {
		fmt.Fprintln(c.stdout, "no unfinished procedure matches")
		return
	}
	fmt.Fprintf(c.stdout, "%s %s\n", verb, plural(int(nc), "procedure"))
	if r.GetTruncated() {
		fmt.Fprintf(c.stdout, "(too many to list: the first %d cancelled and %d not cancelled are)\n", len(cancelled), len(skipped))
	}
	if len(cancelled) > 0 {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tOWNER\tSUBMITTED\tNOTE")
		for _, p := range cancelled {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.GetId(), p.GetType(), p.GetState(), orDash(p.GetOwner()),
				time.UnixMilli(p.GetSubmittedUnixMs()).Format("2006-01-02 15:04:05"), procNote(p))
		}
		tw.Flush()
	}
	if len(skipped) > 0 {
		fmt.Fprintf(c.stdout, "\nnot cancelled (%d):\n", ns)
		for _, s := range skipped {
			fmt.Fprintf(c.stdout, "  %d %s: %s\n", s.GetProcedure().GetId(), s.GetProcedure().GetType(), s.GetReason())
		}
	}
	if done {
		fmt.Fprintf(c.stdout, "(repair record %d: 'baton cluster repairs'; a cancelled procedure rolls back: 'baton proc wait ID')\n", r.GetRecord())
	}
}

func (c *cli) procBypass(args []string) int {
	e := c.command("proc bypass", "ID [--override] [--recursive] --yes", repairAdvice)
	override := e.fs.Bool("override", false, "bypass also a procedure that is running a step, waiting for a lock, holding entity locks or rolling back")
	recursive := e.fs.Bool("recursive", false, "bypass its unfinished descendants too")
	yes := e.yesFlag()
	pos, code, ok := e.parse(args, 1, "procedure ID")
	if !ok {
		return code
	}
	id, err := parseID(pos[0])
	if err != nil {
		return e.fail(err)
	}
	return e.repair(*yes, false, func(cl *client.Client, dry bool) (*adminpb.RepairResponse, error) {
		return cl.BypassProcedure(c.ctx, id, *recursive, c.repairOptions(*override, dry))
	})
}

// ---- cluster maintenance, repairs

const maintenanceUsage = `usage: baton cluster maintenance <command> [flags]

commands:
  on [--reason R] --yes   pause dispatch (no region open or close is sent;
                          procedures that would send one wait, saying so) and
                          refuse new procedures, until turned off; repair
                          commands and lock releases still work
  off                     resume dispatch and accept new procedures
  status [--stale]        whether it is on, since when, by whom and why

The state is replicated: it survives failovers and restarts.
` + "Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json\nand --timeout.\n"

var maintenanceAdvice = map[codes.Code]string{
	codes.FailedPrecondition: "nothing was done; the message says why",
}

func (c *cli) clusterMaintenance(args []string) int {
	return c.subcommands("cluster maintenance", maintenanceUsage, args, map[string]func([]string) int{
		"on":     func(a []string) int { return c.maintenanceSet(true, a) },
		"off":    func(a []string) int { return c.maintenanceSet(false, a) },
		"status": c.maintenanceStatus,
	})
}

func (c *cli) maintenanceSet(on bool, args []string) int {
	word := "off"
	synopsis := ""
	if on {
		word, synopsis = "on", "[--reason R] --yes"
	}
	e := c.command("cluster maintenance "+word, synopsis, maintenanceAdvice)
	var reason *string
	yes := new(bool)
	if on {
		reason = e.fs.String("reason", "", "why (shown by status, cluster status and in the refusals)")
		yes = e.yesFlag()
	}
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	r := ""
	if reason != nil {
		r = *reason
	}
	return e.repair(!on || *yes, false, func(cl *client.Client, dry bool) (*adminpb.RepairResponse, error) {
		return cl.SetMaintenance(c.ctx, on, r, c.repairOptions(false, dry))
	})
}

func (c *cli) maintenanceStatus(args []string) int {
	return c.staleRead("cluster maintenance status", nil, args, func(cl *client.Client, rf *readFlags) (any, func(), error) {
		m, err := cl.GetMaintenance(c.ctx, rf.opts()...)
		return toMaintenanceJSON(m), func() {
			fmt.Fprintf(c.stdout, "maintenance mode %s\n", describeMaintenance(m))
			c.printServed(m.GetRead())
		}, err
	})
}

// repairRecordJSON is one record in cluster repairs' --json document.
type repairRecordJSON struct {
	Seq     uint64            `json:"seq"`
	At      string            `json:"at"`
	Action  string            `json:"action"`
	Args    map[string]string `json:"args"`
	Caller  string            `json:"caller"`
	Peer    string            `json:"peer"`
	Via     string            `json:"via,omitempty"`
	Node    string            `json:"node"`
	Outcome string            `json:"outcome"`
	Code    string            `json:"code,omitempty"`
	Result  string            `json:"result"`
}

type repairsJSON struct {
	Repairs []repairRecordJSON `json:"repairs"`
	Read    *readJSON          `json:"read,omitempty"`
}

func (c *cli) clusterRepairs(args []string) int {
	e := c.command("cluster repairs", "[--after SEQ] [--stale]", nil)
	after := e.fs.Uint64("after", 0, "only the records after this sequence number")
	rf := addReadFlags(e.fs)
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		recs, err := cl.ListRepairs(c.ctx, *after, rf.opts()...)
		doc := repairsJSON{Repairs: []repairRecordJSON{}, Read: toReadJSON(rf.served)}
		for _, r := range recs {
			args := r.GetArgs()
			if args == nil {
				args = map[string]string{}
			}
			doc.Repairs = append(doc.Repairs, repairRecordJSON{Seq: r.GetSeq(), At: msTime(r.GetAtUnixMs()), Action: r.GetAction(), Args: args,
				Caller: r.GetCaller(), Peer: r.GetPeer(), Via: r.GetVia(), Node: r.GetNode(), Outcome: r.GetOutcome(), Code: r.GetCode(), Result: r.GetResult()})
		}
		return doc, func() {
			if len(recs) == 0 {
				fmt.Fprintln(c.stdout, "no repairs recorded")
				return
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTIME\tACTION\tARGS\tCALLER\tOUTCOME\tRESULT")
			for _, r := range recs {
				var kv []string
				for _, k := range slices.Sorted(maps.Keys(r.GetArgs())) {
					kv = append(kv, k+"="+r.GetArgs()[k])
				}
				who := r.GetCaller()
				if r.GetPeer() != "" {
					who += " (" + r.GetPeer() + ")"
				}
				outcome := r.GetOutcome()
				if r.GetCode() != "" {
					outcome += " " + r.GetCode()
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.GetSeq(), time.UnixMilli(r.GetAtUnixMs()).Format("2006-01-02 15:04:05"),
					r.GetAction(), orDash(strings.Join(kv, " ")), orDash(who), outcome, r.GetResult())
			}
			tw.Flush()
			c.printServed(rf.served)
		}, err
	})
}

// plural is "1 procedure", "2 procedures".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// cancelCounts counts what a cancel matched: all of it, from a leader
// that counts (its lists may be cut), else the lists.
func cancelCounts(r *adminpb.CancelProceduresResponse) (cancelled, skipped int64) {
	if r.GetCancelledCount() > 0 || r.GetSkippedCount() > 0 {
		return r.GetCancelledCount(), r.GetSkippedCount()
	}
	return int64(len(r.GetCancelled())), int64(len(r.GetSkipped()))
}
