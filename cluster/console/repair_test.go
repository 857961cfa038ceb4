package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/proto/adminpb"
)

// post posts form to path on master m's console, following a redirect, and
// returns the last answer's status, body and URL.
func post(t *testing.T, m *clustertest.Master, path string, form url.Values) (int, string, *url.URL) {
	t.Helper()
	resp, err := http.PostForm("http://"+m.HTTPAddr()+path, form)
	return readAnswer(t, "POST "+path, resp, err)
}

// repairs reads every repair record.
func repairs(t *testing.T, cl *client.Client) []*adminpb.RepairRecord {
	t.Helper()
	recs, err := cl.ListRepairs(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// lastRepair is the newest repair record, checked against what a console
// call should have recorded: action, outcome and the console's name for
// the caller.
func lastRepair(t *testing.T, cl *client.Client, m *clustertest.Master, action, outcome string, count int) *adminpb.RepairRecord {
	t.Helper()
	recs := repairs(t, cl)
	if len(recs) != count {
		t.Fatalf("%d repair records, want %d: %v", len(recs), count, recs)
	}
	r := recs[len(recs)-1]
	if r.GetAction() != action || r.GetOutcome() != outcome || !strings.HasPrefix(r.GetCaller(), "console@"+m.ID+" (browser 127.0.0.1:") || r.GetPeer() == "" {
		t.Fatalf("the last repair record: %v, want %s %s by console@%s (browser 127.0.0.1:...) with a peer", r, action, outcome, m.ID)
	}
	return r
}

// confirmForm is the confirmation form's fields, as a browser would post
// them with the box ticked: the hidden ones and those given.
func confirmForm(t *testing.T, body string, extra url.Values) url.Values {
	t.Helper()
	form := between(body, `id="confirm-form">`, "</form>")
	if form == "" {
		t.Fatalf("no confirmation form:\n%s", body)
	}
	v := url.Values{}
	for _, in := range strings.Split(form, `<input type="hidden" `)[1:] {
		name := between(in, `name="`, `"`)
		v.Add(name, html.UnescapeString(between(in, `value="`, `"`)))
	}
	for k, vs := range extra {
		v[k] = vs
	}
	return v
}

// Each repair action of the console: its confirmation page shows the
// leader's dry run (or its refusal and why), a POST without the ticked box
// does nothing, a confirmed one does it, records it in the console's name
// and shows the record; maintenance mode shows on every page while on.
func TestRepairActions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cl := f.cl
	leader, standby := f.leader, f.standby
	confirmPage := func(m *clustertest.Master, path string, wants ...string) string {
		t.Helper()
		code, body := get(t, m, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		mustContain(t, path, body, wants...)
		return body
	}
	refused := func(m *clustertest.Master, path, code string, reason ...string) {
		t.Helper()
		body := confirmPage(m, path, append([]string{`id="dry-run-refusal"`, `id="dry-run-code">` + code + "<"}, reason...)...)
		if strings.Contains(body, `id="confirm-form"`) {
			t.Fatalf("GET %s: a refused dry run offers to confirm", path)
		}
	}
	// Nothing recorded yet, and the repairs page says so.
	confirmPage(leader, "/ui/repairs", `id="no-repairs"`, `id="nav-repairs"`)

	// Bypass: the fanout has children, so without recursive the leader
	// refuses, and says why.
	fan := fmt.Sprint(f.fanoutID)
	bypass := "/ui/procedures/" + fan + "/bypass"
	confirmPage(standby, "/ui/procedures/"+fan, `id="bypass-form"`, `id="bypass-recursive"`)
	refused(standby, bypass, "FAILED_PRECONDITION", "has unfinished children", "recursive")
	body := confirmPage(standby, bypass+"?recursive=1", `id="dry-run-summary">bypass procedure `+fan, "and its 3 unfinished descendants",
		`<input type="hidden" name="recursive" value="1">`, `class="bypassed"`)
	// Unticked: nothing happens, nothing is recorded.
	code, body2, _ := post(t, standby, bypass, confirmForm(t, body, nil))
	if code != http.StatusBadRequest || !strings.Contains(body2, "Nothing done: tick the box") {
		t.Fatalf("unconfirmed bypass: %d\n%s", code, body2)
	}
	if p, _ := cl.Get(ctx, f.fanoutID); client.Terminal(p.GetState()) || len(repairs(t, cl)) != 0 {
		t.Fatalf("an unconfirmed bypass acted: %v", p)
	}
	// Confirmed without recursive (a hand-made form): the leader refuses,
	// the page says why, and the refusal is recorded.
	code, body2, _ = post(t, standby, bypass, url.Values{"confirm": {"yes"}})
	if code != http.StatusConflict || !strings.Contains(body2, "Nothing done: repair: procedure "+fan) {
		t.Fatalf("a refused bypass: %d\n%s", code, body2)
	}
	lastRepair(t, cl, standby, "proc bypass", "refused", 1)
	// Confirmed as the dry run was asked: done, and the procedure's page
	// says what was done, from the record.
	code, body2, at := post(t, standby, bypass, confirmForm(t, body, url.Values{"confirm": {"yes"}}))
	if code != http.StatusOK || at.Path != "/ui/procedures/"+fan || at.Query().Get("record") != "2" {
		t.Fatalf("confirmed bypass: %d at %v", code, at)
	}
	mustContain(t, "after the bypass", body2, `id="repair-flash"`, "Repair record 2</a>, proc bypass: <strong>done</strong>")
	rec := lastRepair(t, cl, standby, "proc bypass", "done", 2)
	if rec.GetArgs()["recursive"] != "true" || rec.GetArgs()["id"] != fan {
		t.Fatalf("bypass record's arguments: %v", rec.GetArgs())
	}
	if p, err := cl.Wait(ctx, f.fanoutID); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("the bypassed fanout: %v %v", p.GetState(), err)
	}
	// Cross-site: refused before anything is read.
	req, _ := http.NewRequest(http.MethodPost, "http://"+standby.HTTPAddr()+bypass, strings.NewReader("confirm=yes&recursive=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site bypass: %v %v, want 403", resp.StatusCode, err)
	}

	// Cancel matching: from the procedures page's filters.
	sleep := fmt.Sprint(f.sleepID)
	body = confirmPage(leader, "/ui/procedures?owner="+sleepOwner, `id="cancel-matching"`)
	cancelURL := html.UnescapeString(hrefOf(body, "cancel-matching"))
	if _, body := get(t, leader, "/ui/procedures"); strings.Contains(body, `id="cancel-matching"`) {
		t.Fatal("the unfiltered list offers to cancel everything")
	}
	refused(leader, "/ui/procedures/cancel?state=SUCCESS", "INVALID_ARGUMENT", "only unfinished procedures can be cancelled")
	refused(leader, "/ui/procedures/cancel?owner="+sleepOwner+"&after=1h", "refused by the console", "submitted after")
	refused(leader, "/ui/procedures/cancel?older_than=soon", "refused by the console", "is not an age")
	// "Submitted before" an age ago is an age: nothing is an hour old.
	confirmPage(leader, "/ui/procedures/cancel?owner="+sleepOwner+"&before=1h", `name="older_than" value="1h0m0s"`, `id="dry-run-summary">no unfinished procedure matches`)
	body = confirmPage(leader, cancelURL, `id="dry-run-summary">would cancel 1 procedure<`, `class="would-cancel" data-id="`+sleep+`"`)
	code, _, _ = post(t, leader, "/ui/procedures/cancel", confirmForm(t, body, nil))
	if p, _ := cl.Get(ctx, f.sleepID); code != http.StatusBadRequest || p.GetAbortRequested() || len(repairs(t, cl)) != 2 {
		t.Fatalf("an unconfirmed cancel: %d, %v", code, p)
	}
	code, body2, at = post(t, leader, "/ui/procedures/cancel", confirmForm(t, body, url.Values{"confirm": {"yes"}}))
	if code != http.StatusOK || at.Path != "/ui/procedures" || at.Query().Get("owner") != sleepOwner {
		t.Fatalf("confirmed cancel: %d at %v", code, at)
	}
	mustContain(t, "after the cancel", body2, "proc cancel: <strong>done</strong>", "cancelled 1 procedure")
	lastRepair(t, cl, leader, "proc cancel", "done", 3)
	if p, err := cl.Wait(ctx, f.sleepID); err != nil || p.GetState() != client.StateRolledBack {
		t.Fatalf("the cancelled sleep: %v %v", p.GetState(), err)
	}

	// Regions: a table of one region, and a fourth region server to move
	// it to (and to recover).
	id, err := cl.CreateTable(ctx, "", "t2", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("create t2: %v %v", p.GetState(), err)
	}
	f.c.StartRegionServer("rs4")
	regions, err := cl.ListRegions(ctx, "default:t2")
	if err != nil || len(regions) != 1 {
		t.Fatalf("t2's regions: %v %v", regions, err)
	}
	region, on := regions[0].GetName(), regions[0].GetServer()
	regionPath := "/ui/regions/" + url.PathEscape(region)
	confirmPage(leader, "/ui/regions?table=default:t2", `href="`+html.EscapeString(regionPath)+`/assign"`, `href="`+html.EscapeString(regionPath)+`/unassign"`)
	confirmPage(leader, regionPath+"/assign", `id="dry-run-summary">region `+region+" is already OPEN on "+on+": nothing to do", `value="rs4"`)
	refused(leader, regionPath+"/assign?server=rs4", "FAILED_PRECONDITION", "already OPEN on "+on)
	refused(leader, regionPath+"/assign?server=rs9", "NOT_FOUND", "rs9", "(not registered)")
	t1, err := cl.ListRegions(ctx, "default:t1")
	if err != nil || len(t1) == 0 {
		t.Fatal(err)
	}
	refused(leader, "/ui/regions/"+url.PathEscape(t1[0].GetName())+"/unassign", "FAILED_PRECONDITION", "is locked by procedure "+fmt.Sprint(f.lockID))
	if code, _ := get(t, leader, "/ui/regions/default:nope,00000,1/assign"); code != http.StatusNotFound {
		t.Fatalf("assign of an unknown region: %d, want 404", code)
	}

	body = confirmPage(leader, regionPath+"/unassign", `id="dry-run-summary">close region `+region, `name="nonce"`)
	code, _, at = post(t, leader, regionPath+"/unassign", confirmForm(t, body, url.Values{"confirm": {"yes"}}))
	if code != http.StatusOK || at.Path != "/ui/regions" || at.Query().Get("table") != "default:t2" {
		t.Fatalf("confirmed unassign: %d at %v", code, at)
	}
	rec = lastRepair(t, cl, leader, "region unassign", "done", 4)
	f.c.WaitFor("t2's region closed", func() bool {
		rs, err := cl.ListRegions(ctx, "default:t2")
		return err == nil && rs[0].GetState() == "CLOSED" && rs[0].GetProcId() == 0
	})
	// Posted twice (the same nonce): one procedure.
	form := confirmForm(t, confirmPage(leader, regionPath+"/assign?server=rs4", `id="dry-run-summary">open region `+region+" on rs4"), url.Values{"confirm": {"yes"}})
	post(t, leader, regionPath+"/assign", form)
	post(t, leader, regionPath+"/assign", form)
	recs := repairs(t, cl)
	if len(recs) != 6 || !strings.Contains(recs[5].GetResult(), "already started as procedure") {
		t.Fatalf("an assign posted twice: %v", recs[4:])
	}
	f.c.WaitFor("t2's region open on rs4", func() bool {
		rs, err := cl.ListRegions(ctx, "default:t2")
		return err == nil && rs[0].GetState() == "OPEN" && rs[0].GetServer() == "rs4" && rs[0].GetProcId() == 0
	})

	// Recovery of a live server: refused without override; with it, rs4
	// is expired and its region moves.
	confirmPage(leader, "/ui/servers/rs4", `id="recover-form"`)
	refused(leader, "/ui/servers/rs4/recover", "FAILED_PRECONDITION", "is live")
	body = confirmPage(leader, "/ui/servers/rs4/recover?override=1", `id="dry-run-summary">expire the live rs4/`)
	code, body2, at = post(t, leader, "/ui/servers/rs4/recover", confirmForm(t, body, url.Values{"confirm": {"yes"}}))
	if code != http.StatusOK || at.Path != "/ui/servers/rs4" {
		t.Fatalf("confirmed recovery: %d at %v\n%s", code, at, body2)
	}
	rec = lastRepair(t, cl, leader, "rs recover", "done", 7)
	f.c.WaitFor("t2's region open away from rs4", func() bool {
		rs, err := cl.ListRegions(ctx, "default:t2")
		return err == nil && rs[0].GetState() == "OPEN" && rs[0].GetServer() != "rs4" && rs[0].GetProcId() == 0
	})

	// Maintenance mode: on from the overview, with a reason; a banner on
	// every page of every master; off again.
	const reason = "swap <rs2>'s disk"
	confirmPage(leader, "/", `id="maintenance-on-form"`, `id="maintenance-state">off<`)
	body = confirmPage(leader, "/ui/maintenance?on=1", `id="dry-run-summary">turn maintenance mode on`, `name="reason"`)
	code, _, _ = post(t, leader, "/ui/maintenance", confirmForm(t, body, url.Values{"reason": {reason}}))
	if m, _ := cl.GetMaintenance(ctx); code != http.StatusBadRequest || m.GetOn() {
		t.Fatalf("an unconfirmed maintenance on: %d, %v", code, m)
	}
	code, body2, at = post(t, leader, "/ui/maintenance", confirmForm(t, body, url.Values{"reason": {reason}, "confirm": {"yes"}}))
	if code != http.StatusOK || at.Path != "/" {
		t.Fatalf("confirmed maintenance on: %d at %v", code, at)
	}
	escaped := html.EscapeString(reason)
	mustContain(t, "after maintenance on", body2, `id="maintenance-banner"`, `id="maintenance-reason">`+escaped+"<", "console@"+leader.ID, `id="maintenance-off-form"`)
	if strings.Contains(body2, reason) {
		t.Fatal("the maintenance reason is not escaped")
	}
	rec = lastRepair(t, cl, leader, "maintenance on", "done", 8)
	if rec.GetArgs()["reason"] != reason {
		t.Fatalf("maintenance record: %v", rec)
	}
	f.c.WaitFor("the banner on the standby's pages", func() bool {
		_, body := get(t, standby, "/ui/locks")
		return strings.Contains(body, `id="maintenance-reason">`+escaped+"<")
	})
	for _, path := range []string{"/ui/procedures", "/ui/procedures/" + sleep, "/ui/servers/rs1", "/ui/regions", "/ui/tables", "/ui/repairs", "/ui/maintenance?on=0"} {
		confirmPage(leader, path, `id="maintenance-banner"`)
	}
	body = confirmPage(leader, "/ui/maintenance?on=0", `id="dry-run-summary">turn maintenance mode off`)
	post(t, leader, "/ui/maintenance", confirmForm(t, body, url.Values{"confirm": {"yes"}}))
	lastRepair(t, cl, leader, "maintenance off", "done", 9)
	if _, body := get(t, leader, "/ui/procedures"); strings.Contains(body, "maintenance-banner") {
		t.Fatal("the banner outlives maintenance mode")
	}

	// The repairs page: every record, newest last, in the console's name.
	body = confirmPage(leader, "/ui/repairs", `data-seq="1" data-outcome="refused"`, `data-seq="9" data-outcome="done"`,
		"console@"+standby.ID+" (browser 127.0.0.1:", "maintenance on", "recursive=true")
	confirmPage(leader, "/ui/repairs?after=8", `data-seq="9"`)
	if code, _ := get(t, leader, "/ui/repairs?after=x"); code != http.StatusBadRequest {
		t.Fatalf("a bad page token: %d, want 400", code)
	}

	// Paged: a console of 4 records a page shows the newest 4, and pages
	// through them all from the first.
	con, err := console.New(console.Config{AdminAddr: leader.AdminAddr(), PageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	getPage := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body = getPage("/ui/repairs")
	if n := strings.Count(body, `class="repair"`); n != 4 || !strings.Contains(body, `data-seq="6"`) || strings.Contains(body, `data-seq="5"`) {
		t.Fatalf("the newest 4 records: %d shown\n%s", n, body)
	}
	var seen []string
	for path := "/ui/repairs?after=0"; path != ""; path = html.UnescapeString(hrefOf(body, "next-repairs")) {
		body = getPage(path)
		for _, row := range strings.Split(body, `class="repair" id="repair-`)[1:] {
			seen = append(seen, row[:strings.IndexByte(row, '"')])
		}
	}
	if got := strings.Join(seen, ","); got != "1,2,3,4,5,6,7,8,9" {
		t.Fatalf("paging through the records: %s", got)
	}
}
