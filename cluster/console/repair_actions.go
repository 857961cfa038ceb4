package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The repair actions' descriptions (see repair.go): what each shows of its
// subject, its options, and its call.

const bypassEffect = "The guarded bypass: the procedure finishes as SUCCESS at its next turn without running another step, " +
	"and whatever it changed stays as it is (nothing is rolled back). Without override the leader refuses a procedure that is " +
	"running a step, waiting for a lock, holding entity locks or rolling back; one with unfinished children needs recursive."

func (c *Console) bypassAction(rd *reads, r *http.Request, form url.Values) (*repairAction, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	a := &repairAction{Title: fmt.Sprintf("Bypass procedure %d", id), Verb: fmt.Sprintf("bypass procedure %d", id),
		Path: fmt.Sprintf("/ui/procedures/%d/bypass", id), Back: fmt.Sprintf("/ui/procedures/%d", id), Effect: bypassEffect}
	proc, err := rd.getProc(id)
	if err != nil {
		return a, err
	}
	a.Facts = procFacts(proc)
	override := checkbox(form, "override", "override", "bypass it even while it runs a step, waits for a lock, holds entity locks or rolls back")
	recursive := checkbox(form, "recursive", "recursive", "bypass its unfinished descendants too")
	a.Options = []option{override, recursive}
	a.call = func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error) {
		r, err := c.actions.BypassProcedure(ctx, id, recursive.Value == "1", client.RepairOptions{Caller: caller, Override: override.Value == "1", DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		return fromRepair(r), nil
	}
	a.done = func(*repairOutcome) string { return a.Back }
	return a, nil
}

// procFacts describes a procedure on a confirmation page.
func procFacts(p *adminpb.Procedure) []fact {
	facts := []fact{
		{Label: "procedure", Text: fmt.Sprintf("%d %s", p.GetId(), p.GetType()), Link: fmt.Sprintf("/ui/procedures/%d", p.GetId())},
		{Label: "state", Text: p.GetWaitingFor(), Badge: p.GetState()},
		{Label: "owner", Text: orDash(p.GetOwner())},
	}
	if n := len(p.GetChildren()); n > 0 {
		facts = append(facts, fact{Label: "children", Text: strconv.Itoa(n)})
	}
	return facts
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

const (
	assignEffect = "A new TransitRegionState procedure opens the region, on the server chosen or on a live one the master picks. " +
		"Without override the leader refuses a region in transition or locked by another procedure. With override the region's own " +
		"procedure is bypassed and the new one queues behind it; it closes the region wherever it may be open before opening it, " +
		"so the region is never open on two servers."
	unassignEffect = "A new TransitRegionState procedure closes the region where it is. Without override the leader refuses a region " +
		"in transition or locked by another procedure; with override the region's own procedure is bypassed and the new one queues behind it."
)

// regionAction describes a region assign (assign: true) or unassign.
func (c *Console) regionAction(assign bool) repairBuilder {
	return func(rd *reads, r *http.Request, form url.Values) (*repairAction, error) {
		name := r.PathValue("region")
		kind, effect := "unassign", unassignEffect
		if assign {
			kind, effect = "assign", assignEffect
		}
		a := &repairAction{Title: fmt.Sprintf("%s region %s", capital(kind), name), Verb: fmt.Sprintf("%s region %s", kind, name),
			Path: regionActionURL(name, kind), Effect: effect}
		rg, err := rd.getRegion(name)
		if err != nil {
			return a, err
		}
		a.Back = "/ui/regions?" + url.Values{"table": {rg.GetTable()}}.Encode()
		a.done = func(*repairOutcome) string { return a.Back }
		a.Facts = []fact{{Label: "region", Text: rg.GetName()},
			{Label: "table", Text: rg.GetTable(), Link: a.Back},
			{Label: "state", Badge: rg.GetState()},
			{Label: "server", Text: orDash(rg.GetServer())}}
		if rg.GetServer() != "" {
			a.Facts[3].Link = serverURL(rg.GetServer())
		}
		if id := rg.GetProcId(); id != 0 {
			a.Facts = append(a.Facts, fact{Label: "moved by", Text: fmt.Sprintf("procedure %d", id), Link: fmt.Sprintf("/ui/procedures/%d", id)})
		}
		server := option{Kind: "select", Name: "server", Label: "open it on", Value: strings.TrimSpace(form.Get("server")),
			Choices: []choice{{"", "a live server the master picks"}}}
		if assign {
			// The registered servers, with their lease state: the leader
			// refuses one that is not live, and says so.
			if srvs, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
				return c.self.ListServers(ctx, &adminpb.ListServersRequest{PageSize: catalogMaxServers, Consistency: cons})
			}, nil); err == nil {
				for _, s := range srvs.GetServers() {
					server.Choices = append(server.Choices, choice{s.GetId(), fmt.Sprintf("%s (%s, %d regions)", s.GetId(), s.GetLeaseState(), s.GetRegionCount())})
				}
			}
			if server.Value != "" && !slices.ContainsFunc(server.Choices, func(ch choice) bool { return ch.Value == server.Value }) {
				server.Choices = append(server.Choices, choice{server.Value, server.Value + " (not registered)"})
			}
			a.Options = append(a.Options, server)
		}
		override := checkbox(form, "override", "override", "take over a region in transition or locked: its own procedure is bypassed")
		a.Options = append(a.Options, override)
		// A nonce made with the confirmation page: a form posted twice
		// starts one procedure.
		nonce := form.Get("nonce")
		if nonce == "" {
			nonce = newNonce()
		}
		a.Hidden = url.Values{"nonce": {nonce}}
		a.call = func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error) {
			o := client.RepairOptions{Caller: caller, Override: override.Value == "1", DryRun: dryRun}
			var r *adminpb.RepairResponse
			var err error
			if assign {
				r, err = c.actions.AssignRegion(ctx, name, server.Value, nonce, o)
			} else {
				r, err = c.actions.UnassignRegion(ctx, name, nonce, o)
			}
			if err != nil {
				return nil, err
			}
			return fromRepair(r), nil
		}
		return a, nil
	}
}

// catalogMaxServers is the largest page of servers: the choices of a
// server to open a region on are the first that many.
const catalogMaxServers = 10000

func regionActionURL(region, kind string) string {
	return "/ui/regions/" + url.PathEscape(region) + "/" + kind
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func newNonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "console-" + hex.EncodeToString(b)
}

// getRegion reads one region: the API lists, it does not get, so it lists
// its table from just before the name (a token resuming after the name
// less its last byte, which sorts before it) until the name or one after
// it comes.
func (rd *reads) getRegion(name string) (*adminpb.Region, error) {
	table := name
	if i := strings.IndexByte(name, ','); i > 0 {
		table = name[:i]
	}
	tok := ""
	if len(name) > 1 {
		tok = adminpb.RegionsAfter(name[:len(name)-1])
	}
	for tok != "" {
		resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRegionsResponse, error) {
			return rd.c.self.ListRegions(ctx, &adminpb.ListRegionsRequest{Table: table, PageToken: tok, PageSize: 10, Consistency: cons})
		}, readOf)
		if err != nil {
			// A name that is no region of its table makes a bad token.
			if c := status.Code(err); c == codes.NotFound || c == codes.InvalidArgument {
				break
			}
			return nil, err
		}
		for _, rg := range resp.GetRegions() {
			if rg.GetName() == name {
				return rg, nil
			}
			if rg.GetName() > name {
				return nil, status.Errorf(codes.NotFound, "no region %q (the regions page lists them)", name)
			}
		}
		tok = resp.GetNextPageToken()
	}
	return nil, status.Errorf(codes.NotFound, "no region %q (the regions page lists them)", name)
}

const recoverEffect = "HBCK2's scheduleRecoveries: a ServerCrash procedure for every dead incarnation of the server that still " +
	"has regions recorded on it, which reassigns them. A live server is refused unless override: its lease is then expired first " +
	"(it is fenced and told to drop its regions), and its regions move only once it has provably stopped serving them."

func (c *Console) recoverAction(rd *reads, r *http.Request, form url.Values) (*repairAction, error) {
	id := r.PathValue("id")
	a := &repairAction{Title: "Schedule recovery of region server " + id, Verb: "schedule the recovery of region server " + id,
		Path: serverURL(id) + "/recover", Back: serverURL(id), Effect: recoverEffect}
	a.Facts = []fact{{Label: "region server", Text: id, Link: a.Back}}
	if s, err := rd.getServer(id); err == nil && s != nil {
		a.Facts = append(a.Facts, fact{Label: "lease", Text: "last renewal " + ageOfUnixMs(s.GetLastRenewalUnixMs()), Badge: s.GetLeaseState()},
			fact{Label: "regions", Text: strconv.Itoa(int(s.GetRegionCount())), Link: regionsURLOf("server", id)})
	}
	override := checkbox(form, "override", "override", "recover a live server too: it is expired first")
	a.Options = []option{override}
	a.call = func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error) {
		r, err := c.actions.RecoverServer(ctx, id, client.RepairOptions{Caller: caller, Override: override.Value == "1", DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		return fromRepair(r), nil
	}
	a.done = func(*repairOutcome) string { return a.Back }
	return a, nil
}

func regionsURLOf(key, value string) string {
	return "/ui/regions?" + url.Values{key: {value}}.Encode()
}

const cancelEffect = "Every unfinished root procedure that matches is aborted: it stops before its next step and rolls back what it did, " +
	"with its children. Those that retry until done cannot roll back and are skipped, saying so (bypass them if they must go)."

// cancelStates are the states procedures can be cancelled in.
var cancelStates = []string{client.StateInitializing, client.StateRunnable, client.StateWaiting, client.StateWaitingTimeout}

// cancelAction cancels the procedures matching the procedures page's
// filters: type, state, owner, and its "submitted before" as an age
// (older than). Its other filters have no place in the call: "submitted
// after" is refused rather than dropped (dropping a filter would cancel
// more than was listed); roots only is what cancel does anyway.
//
// The leader evaluates the filter again when the cancel is confirmed, and
// it may match more by then (a procedure submitted meanwhile): the
// confirmation form carries the ids its dry run listed (ids, "3,5,8"),
// and the call cancels those of them that still match, nothing else. A
// confirmation without them is refused, showing the dry run again.
func (c *Console) cancelAction(rd *reads, r *http.Request, form url.Values) (*repairAction, error) {
	f := client.CancelFilter{Type: strings.TrimSpace(form.Get("type")), State: strings.ToUpper(strings.TrimSpace(form.Get("state"))),
		Owner: strings.TrimSpace(form.Get("owner"))}
	a := &repairAction{Title: "Cancel matching procedures", Verb: "cancel the procedures that match", Path: "/ui/procedures/cancel", Effect: cancelEffect}
	var refusals []string
	ids, err := parseIDs(form["ids"])
	if err != nil {
		refusals = append(refusals, err.Error())
	}
	f.IDs = ids
	older := strings.TrimSpace(form.Get("older_than"))
	if before := strings.TrimSpace(form.Get("before")); older == "" && before != "" {
		// From the procedures page: "submitted before" as an age. An age
		// is taken as it is; a time becomes the age it has now, rounded
		// up to the second (the leader measures ages when the call is
		// made, so the set may grow by what crosses the line meanwhile,
		// as with the CLI's --older-than).
		if d, err := time.ParseDuration(strings.TrimPrefix(before, "-")); err == nil {
			older = d.String()
		} else if t, err := parseWhen(before, time.Now()); err != nil {
			refusals = append(refusals, "submitted before: "+err.Error())
		} else if age := time.Since(t); age <= 0 {
			refusals = append(refusals, "submitted before a time to come matches every procedure: give a time past, or an age")
		} else {
			older = (age + time.Second - 1).Truncate(time.Second).String()
		}
	}
	if older != "" {
		d, err := time.ParseDuration(older)
		if err != nil || d < 0 {
			refusals = append(refusals, fmt.Sprintf("older than %q is not an age (15m, 2h)", older))
		} else {
			f.OlderThan = d
		}
	}
	if strings.TrimSpace(form.Get("after")) != "" {
		refusals = append(refusals, "the procedures page filters on \"submitted after\", which a cancel cannot: clear it (or use older than) so that what is cancelled is what was listed")
	}
	a.Refusal = strings.Join(refusals, "; ")
	states := []choice{{"", "any unfinished"}}
	for _, s := range cancelStates {
		states = append(states, choice{s, s})
	}
	if f.State != "" && !slices.Contains(cancelStates, f.State) {
		// Shown as given: the leader says why it cannot be.
		states = append(states, choice{f.State, f.State})
	}
	a.Options = []option{
		{Kind: "text", Name: "type", Label: "type", Value: f.Type},
		{Kind: "select", Name: "state", Label: "state", Value: f.State, Choices: states},
		{Kind: "text", Name: "owner", Label: "owner", Value: f.Owner},
		{Kind: "text", Name: "older_than", Label: "older than", Value: older, Help: "submitted at least this long ago, by the leader's clock (15m, 2h)"},
	}
	list := url.Values{}
	for k, v := range map[string]string{"type": f.Type, "state": f.State, "owner": f.Owner} {
		if v != "" {
			list.Set(k, v)
		}
	}
	if f.OlderThan > 0 {
		list.Set("before", f.OlderThan.String())
	}
	a.Back = "/ui/procedures"
	if len(list) > 0 {
		a.Back += "?" + list.Encode()
	}
	a.call = func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error) {
		if !dryRun && len(f.IDs) == 0 {
			return nil, status.Error(codes.FailedPrecondition, "the confirmation does not say which procedures its dry run listed, "+
				"and the filter may match others by now: confirm below, on the dry run asked again")
		}
		r, err := c.actions.CancelProcedures(ctx, f, client.RepairOptions{Caller: caller, DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		verb := "would cancel"
		if !dryRun {
			verb = "cancelled"
		}
		cancelled, skipped := countCancel(r)
		out := &repairOutcome{Cancel: true, Cancelled: r.GetCancelled(), Skipped: r.GetSkipped(), Record: r.GetRecord(),
			Summary: verb + " " + procedures(cancelled)}
		if r.GetTruncated() {
			out.Summary += " (not all of them listed below)"
		}
		if dryRun && cancelled > 0 {
			out.Bind = url.Values{"ids": {joinIDs(cancelIDs(r))}}
		}
		if n := skipped; n > 0 {
			out.Summary += "; " + procedures(n) + " more cannot be cancelled"
		}
		if cancelled == 0 && skipped == 0 {
			out.Summary = "no unfinished procedure matches"
		}
		return out, nil
	}
	a.done = func(*repairOutcome) string { return a.Back }
	return a, nil
}

// countCancel counts what a cancel matched: all of it, from a leader
// that counts (its lists may be cut), else the lists.
func countCancel(r *adminpb.CancelProceduresResponse) (cancelled, skipped int) {
	cancelled, skipped = len(r.GetCancelled()), len(r.GetSkipped())
	if r.GetCancelledCount() > 0 || r.GetSkippedCount() > 0 {
		cancelled, skipped = int(r.GetCancelledCount()), int(r.GetSkippedCount())
	}
	return cancelled, skipped
}

// cancelIDs are the ids a cancel's dry run matched, which its
// confirmation binds itself to: every one (cancelled_ids) where the
// listed procedures may be cut.
func cancelIDs(r *adminpb.CancelProceduresResponse) []uint64 {
	if ids := r.GetCancelledIds(); len(ids) > 0 {
		return ids
	}
	ids := make([]uint64, len(r.GetCancelled()))
	for i, p := range r.GetCancelled() {
		ids[i] = p.GetId()
	}
	return ids
}

func joinIDs(ids []uint64) string {
	shown := make([]string, len(ids))
	for i, id := range ids {
		shown[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(shown, ",")
}

// parseIDs reads the ids of a cancel's confirmation: comma-separated
// lists of procedure ids.
func parseIDs(lists []string) ([]uint64, error) {
	var ids []uint64
	for _, list := range lists {
		for _, s := range strings.Split(list, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := strconv.ParseUint(s, 10, 64)
			if err != nil || id == 0 {
				return nil, fmt.Errorf("ids: %q is not a procedure id", s)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// procedures counts procedures in words: "1 procedure", "3 procedures".
func procedures(n int) string {
	if n == 1 {
		return "1 procedure"
	}
	return fmt.Sprintf("%d procedures", n)
}

const (
	maintenanceOnEffect = "While maintenance mode is on the leader sends no region open or close (procedures that would, wait, saying so) " +
		"and refuses new procedures; repairs and lock releases still work. It is replicated: it survives failovers and restarts."
	maintenanceOffEffect = "Dispatch resumes: procedures waiting for maintenance mode to end go on, and new procedures are accepted."
)

// maintenanceAction turns maintenance mode on (on=1) or off. The reason is
// filled in the confirmation form: it does not change what the call does.
func (c *Console) maintenanceAction(rd *reads, r *http.Request, form url.Values) (*repairAction, error) {
	on := ticked(form.Get("on"))
	a := &repairAction{Title: "Turn maintenance mode off", Verb: "turn maintenance mode off", Path: "/ui/maintenance", Back: "/#maintenance",
		Effect: maintenanceOffEffect}
	if on {
		a.Title, a.Verb, a.Effect = "Turn maintenance mode on", "turn maintenance mode on", maintenanceOnEffect
	}
	a.Facts = []fact{{Label: "maintenance mode", Text: describeMaintenance(rd.node.GetMaintenance())}}
	onOpt := option{Kind: "select", Name: "on", Label: "turn it", Choices: []choice{{"1", "on"}, {"0", "off"}}, Value: "0"}
	if on {
		onOpt.Value = "1"
	}
	reason := strings.TrimSpace(form.Get("reason"))
	a.Options = []option{onOpt}
	if on {
		a.Options = append(a.Options, option{Kind: "text", Name: "reason", Label: "reason", Value: reason, Final: true,
			Help: "shown on every page while it is on, and in the records"})
	}
	a.call = func(ctx context.Context, dryRun bool, caller string) (*repairOutcome, error) {
		r, err := c.actions.SetMaintenance(ctx, on, reason, client.RepairOptions{Caller: caller, DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		return fromRepair(r), nil
	}
	a.done = func(*repairOutcome) string { return "/#maintenance" }
	return a, nil
}

// describeMaintenance says whether maintenance mode is on, since when, by
// whom and why.
func describeMaintenance(m *adminpb.Maintenance) string {
	if !m.GetOn() {
		return "off"
	}
	s := "on since " + fmtUnixMs(m.GetSinceUnixMs())
	if m.GetBy() != "" {
		s += " by " + m.GetBy()
	}
	if m.GetReason() != "" {
		s += ": " + m.GetReason()
	}
	return s
}
