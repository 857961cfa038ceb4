package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The repair kit's actions (admin.proto, "Repair kit") from the console.
// Each has one URL: its GET is the confirmation page, which asks the
// leader for a dry run of the call with the options in the query and shows
// the answer (what would be done, or the refusal and why); its POST, from
// that page's form with confirm=yes, makes the call with the options the
// form carries, which are those of the dry run shown. Changing an option
// is a new GET, so what is confirmed is always what was just shown.

// repairAction is one repair call on one subject, as its confirmation page
// shows it and its POST makes it.
type repairAction struct {
	// Title heads the page ("Bypass procedure 7"); Verb completes "I want
	// to ..." beside the confirmation box and names the button.
	Title, Verb string
	// Path is the action's URL; Back the subject's page.
	Path, Back string
	// Effect says what the call does in general; Facts describe the
	// subject as it stands.
	Effect string
	Facts  []fact
	// Options can be changed on the page (each change is a new dry run);
	// Final ones are filled in the confirmation form itself, as they do
	// not change what the call does (maintenance mode's reason).
	Options []option
	// Hidden goes with the confirmation unchanged (an assign's nonce, so
	// that a form posted twice starts one procedure).
	Hidden url.Values
	// Refusal, when set, is the console's own: the call is not even asked
	// for (a filter the API cannot express).
	Refusal string
	// call makes the call, as a dry run or not, in caller's name.
	call func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error)
	// done is the page to show once the call is made.
	done func(*repairOutcome) string
}

// fact is a row of the subject's description: Text, linked to Link if
// set, followed by a badge if Badge is set.
type fact struct {
	Label, Text, Link, Badge string
}

// option is an input of a repair action's options.
type option struct {
	// Kind: checkbox, select or text.
	Kind, Name, Label, Help string
	// Value: a text's or a select's; a ticked checkbox's is "1".
	Value   string
	Choices []choice
	Final   bool
}

type choice struct{ Value, Label string }

// Shown is an option's value in words, on the confirmation form.
func (o option) Shown() string {
	switch o.Kind {
	case "checkbox":
		if o.Value == "1" {
			return "yes"
		}
		return "no"
	case "select":
		for _, c := range o.Choices {
			if c.Value == o.Value {
				return c.Label
			}
		}
	}
	if o.Value == "" {
		return "—"
	}
	return o.Value
}

func checkbox(form url.Values, name, label, help string) option {
	o := option{Kind: "checkbox", Name: name, Label: label, Help: help}
	if ticked(form.Get(name)) {
		o.Value = "1"
	}
	return o
}

// ticked reads a checkbox (or a flag in a link): the console's forms send
// 1, a hand-written URL may say on, true or yes.
func ticked(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "on", "true", "yes":
		return true
	}
	return false
}

// repairOutcome is a repair call's answer, whichever call it was.
type repairOutcome struct {
	Summary  string
	ProcIDs  []uint64
	Bypassed []uint64
	Record   uint64
	// Cancel: a CancelProcedures answer, with its lists.
	Cancel      bool
	Cancelled   []*adminpb.Procedure
	Skipped     []*adminpb.SkippedProcedure
	Maintenance *adminpb.Maintenance
	// Bind, from a dry run, goes with the confirmation unchanged: what
	// the dry run showed, where the call would otherwise decide anew (a
	// cancel's ids).
	Bind url.Values
}

func fromRepair(r *adminpb.RepairResponse) *repairOutcome {
	return &repairOutcome{Summary: r.GetSummary(), ProcIDs: r.GetProcIds(), Bypassed: r.GetBypassed(), Record: r.GetRecord(), Maintenance: r.GetMaintenance()}
}

// repairBuilder describes the action a request names, from the form's
// options (the query of a GET, the posted form of a POST). An error means
// the subject cannot be shown (no such procedure).
type repairBuilder func(rd *reads, r *http.Request, form url.Values) (*repairAction, error)

// repairPage is a repair action's confirmation page.
type repairPage struct {
	base
	A *repairAction
	// DryRun is the leader's answer to the dry run; Refusal and Code its
	// refusal (or failure) instead.
	DryRun        *repairOutcome
	Refusal, Code string
	// Message says why an attempt did nothing.
	Message string
}

// CanConfirm: the dry run would act (a refusal leaves only the options to
// change; a cancel of nothing has nothing to confirm).
func (p repairPage) CanConfirm() bool {
	return p.Refusal == "" && p.DryRun != nil && (!p.DryRun.Cancel || len(p.DryRun.Cancelled) > 0)
}

// handleRepair serves a repair action at pattern (a path): GET its
// confirmation, POST (same-origin only) the call.
func (c *Console) handleRepair(mux *http.ServeMux, pattern, nav string, build repairBuilder) {
	mux.Handle("GET "+pattern, c.adminOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.repairConfirm(w, r, nav, build, r.URL.Query(), http.StatusOK, "")
	})))
	mux.Handle("POST "+pattern, c.sameOrigin.Handler(c.adminOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.repairPost(w, r, nav, build)
	}))))
}

// repairConfirm shows the confirmation page of the action build describes
// with form's options: the leader's dry run, and message if an attempt
// did nothing.
func (c *Console) repairConfirm(w http.ResponseWriter, r *http.Request, nav string, build repairBuilder, form url.Values, code int, message string) {
	rd := c.pageReads(w, r, "Repair")
	if rd == nil {
		return
	}
	a, err := build(rd, r, form)
	if err != nil {
		title := "Repair"
		if a != nil {
			title = a.Title
		}
		c.fail(w, rd, title, err)
		return
	}
	p := repairPage{A: a, Message: message}
	switch {
	case a.Refusal != "":
		p.Refusal, p.Code = a.Refusal, "refused by the console"
	case rd.stale:
		// Only the leader repairs, and none answers this node: asking
		// would only wait for the client to give up.
		p.Refusal, p.Code = "only the leader repairs, and no leader answers "+rd.node.GetNodeId()+" ("+rd.why+")", adminpb.CodeName(codes.Unavailable)
	default:
		// A dry run answers as a read does: bounded like one.
		ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ReadTimeout)
		out, err := a.call(ctx, true, c.callerName(rd, r))
		cancel()
		if err != nil {
			p.Refusal, p.Code = status.Convert(err).Message(), adminpb.CodeName(status.Code(err))
		} else {
			p.DryRun = out
		}
	}
	p.base = c.base(rd, a.Title, nav, false)
	c.render(w, code, "repair", p)
}

// repairPost is the POST of a confirmation form: without confirm=yes it
// asks again, doing nothing; with it, it makes the call and shows the
// subject's page, or the confirmation again saying why nothing was done.
func (c *Console) repairPost(w http.ResponseWriter, r *http.Request, nav string, build repairBuilder) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	form := r.PostForm
	if form.Get("confirm") != "yes" {
		c.repairConfirm(w, r, nav, build, form, http.StatusBadRequest, "Nothing done: tick the box to confirm.")
		return
	}
	rd := c.pageReads(w, r, "Repair")
	if rd == nil {
		return
	}
	a, err := build(rd, r, form)
	if err != nil {
		c.fail(w, rd, "Repair", err)
		return
	}
	switch {
	case a.Refusal != "":
		c.repairConfirm(w, r, nav, build, form, http.StatusBadRequest, "Nothing done: "+a.Refusal)
		return
	case rd.stale:
		c.repairConfirm(w, r, nav, build, form, http.StatusServiceUnavailable, "Nothing done: no leader answers "+rd.node.GetNodeId())
		return
	}
	caller := c.callerName(rd, r)
	ctx, cancel := context.WithTimeout(forUser(r), actionTimeout)
	out, err := a.call(ctx, false, caller)
	cancel()
	if err != nil {
		c.log.Warn("repair from the console refused or failed", "action", a.Title, "caller", caller, "error", err)
		c.repairConfirm(w, r, nav, build, form, statusOf(err), "Nothing done: "+status.Convert(err).Message())
		return
	}
	c.log.Info("repair from the console", "action", a.Title, "caller", caller, "record", out.Record, "summary", out.Summary)
	http.Redirect(w, r, withRecord(a.done(out), out.Record), http.StatusSeeOther)
}

// callerName names a repair made from the console, for its record: the
// console's node and the browser's address. The record's principal is the
// user the console acts for (the browser's token or certificate), and its
// address the browser's, which the console names to its master
// (security.FromPeer) and which a master believes from a master only; this
// name is free text beside them.
func (c *Console) callerName(rd *reads, r *http.Request) string {
	return fmt.Sprintf("console@%s (browser %s)", rd.node.GetNodeId(), r.RemoteAddr)
}

// withRecord adds a repair record's number to a page's URL: the page then
// says what the repair did (base).
func withRecord(path string, record uint64) string {
	if record == 0 {
		return path
	}
	frag := ""
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path, frag = path[:i], path[i:]
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "record=" + strconv.FormatUint(record, 10) + frag
}
