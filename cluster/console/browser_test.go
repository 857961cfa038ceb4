package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// chromium finds a Chromium (or Chrome) binary, or skips the test saying
// how to get one: BATON_CHROME names one explicitly. With
// BATON_REQUIRE_CHROMIUM set (.ci/run sets it where it installed one), a
// missing binary fails the test instead.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BATON_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("BATON_REQUIRE_CHROMIUM") != "" {
		t.Fatal("BATON_REQUIRE_CHROMIUM is set but no Chromium is found (chromium, chromium-browser, google-chrome, or $BATON_CHROME)")
	}
	t.Skip("no Chromium here (chromium, chromium-browser, google-chrome, or $BATON_CHROME): the browser tests of the console skip; " +
		"install Debian's chromium package (.ci/run does) to run them")
	return ""
}

// browser is a headless Chromium driven through chromedp, recording every
// uncaught exception, console error and failed load of the pages it shows.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root otherwise
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx, shots: os.Getenv("BATON_SCREENSHOTS")}
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Subscribed before any page loads: uncaught exceptions, console.error
	// and the browser's own error log (a resource that failed to load).
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.errs = append(b.errs, string(m.Type)+": "+m.Text)
				b.mu.Unlock()
			}
		}
	}()
	b.run("start Chromium")
	t.Logf("Chromium started in %v; screenshots go to %s", time.Since(start).Round(time.Millisecond), b.shots)
	return b
}

// run runs actions, failing the test if they fail or take a minute.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that answers a value.
func value[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// checkErrors fails the test if the page logged an error since the last
// check.
func (b *browser) checkErrors(page string) {
	b.t.Helper()
	b.mu.Lock()
	errs := b.errs
	b.errs = nil
	b.mu.Unlock()
	for _, e := range errs {
		b.t.Errorf("%s: %s", page, e)
	}
	if len(errs) > 0 {
		b.t.FailNow()
	}
}

// visit opens url, waits for the page, checks it logged no error, and
// saves a screenshot as name.png.
func (b *browser) visit(url, name string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("main")))
	b.done(name)
}

// done checks the page now shown and saves its screenshot as name.png.
func (b *browser) done(name string) {
	b.t.Helper()
	png := value(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.checkErrors(name)
}

// text is the text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(value(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// count is the number of elements matching sel.
func (b *browser) count(sel string) int {
	b.t.Helper()
	return value(b, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

func (b *browser) path() string {
	b.t.Helper()
	return value(b, "location", chromedp.Location())
}

// The console in a real browser, against a real cluster: every page loads
// without errors and shows what the cluster holds, links lead where they
// say, the abort aborts once confirmed, a standby shows the leader's state
// and, cut off, its own with a stale banner that links to the leader.
func TestConsoleInChromium(t *testing.T) {
	b := newBrowser(t)
	started := time.Now()
	f := newFixture(t)
	ctx := context.Background()
	leader := "http://" + f.leader.HTTPAddr()
	sleep := fmt.Sprint(f.sleepID)

	b.visit(leader+"/", "overview")
	// The console's security policy lets its own style sheet in (a
	// blocked one would be a console error too, but say so plainly).
	if n := value(b, "the style sheet's rules", chromedp.Evaluate[int]("document.styleSheets.length ? document.styleSheets[0].cssRules.length : 0")); n == 0 {
		t.Fatal("overview: the style sheet did not load")
	}
	if role := b.text("#node-role"); role != "leader" {
		t.Fatalf("overview: role %q, want leader", role)
	}
	if n := b.count("tr.member"); n != 3 {
		t.Fatalf("overview: %d masters shown, want 3", n)
	}

	// The sleep appears in the list with its state; its id leads to it.
	b.visit(leader+"/ui/procedures?order=oldest", "procedures")
	state := value(b, "the sleep's row", chromedp.AttributeValue(chromedp.CSS(`tr.proc[data-id="`+sleep+`"]`), "data-state")).Value
	if state != client.StateWaitingTimeout {
		t.Fatalf("procedures: the sleep is %q, want WAITING_TIMEOUT", state)
	}
	b.run("click the sleep's id", chromedp.Click(chromedp.CSS(`tr.proc[data-id="`+sleep+`"] a.proc-link`)),
		chromedp.WaitVisible(chromedp.CSS("#proc-state")))
	if p := b.path(); !strings.HasSuffix(p, "/ui/procedures/"+sleep) {
		t.Fatalf("the id's link led to %s", p)
	}
	if s := b.text("#proc-state"); s != client.StateWaitingTimeout {
		t.Fatalf("procedure page: state %q", s)
	}
	if n := b.count("tr.transition"); n < 2 {
		t.Fatalf("procedure page: %d transitions in the timeline, want the submission and its step", n)
	}
	b.done("procedure")

	// Abort: a confirmation page, a ticked box, a POST.
	b.run("open the abort's confirmation", chromedp.Click(chromedp.CSS("#abort-link")), chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	b.done("abort-confirm")
	if p, err := f.cl.Get(ctx, f.sleepID); err != nil || p.GetAbortRequested() {
		t.Fatalf("the confirmation page aborted already: %v %v", p, err)
	}
	b.run("confirm the abort", chromedp.Click(chromedp.CSS("#confirm-box")), chromedp.Click(chromedp.CSS("#confirm-button")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	b.done("aborted")
	if p, err := f.cl.Wait(ctx, f.sleepID); err != nil || p.GetState() != client.StateRolledBack {
		t.Fatalf("after the console's abort: %v %v, want ROLLEDBACK", p.GetState(), err)
	}

	// The tree of a procedure with children.
	b.visit(fmt.Sprintf("%s/ui/procedures/%d", leader, f.fanoutID), "procedure-tree")
	if n := b.count("#tree li"); n != 4 {
		t.Fatalf("fanout's tree: %d procedures, want the parent and 3 children", n)
	}

	// The lock held from outside and the procedure blocked behind it.
	b.visit(leader+"/ui/locks", "locks")
	chain := b.text("li.chain")
	for _, want := range []string{fmt.Sprint(f.disableID), "DisableTable", "default:t1", lockHolder, fmt.Sprint(f.lockID), lockPurpose} {
		if !strings.Contains(chain, want) {
			t.Fatalf("locks: the chain %q does not name %q", chain, want)
		}
	}
	b.run("follow the blocked procedure", chromedp.Click(chromedp.CSS(`li.chain a.party[data-id="`+fmt.Sprint(f.disableID)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#proc-state")))
	if p := b.path(); !strings.HasSuffix(p, fmt.Sprintf("/ui/procedures/%d", f.disableID)) {
		t.Fatalf("the chain's link led to %s", p)
	}
	b.done("blocked-procedure")

	b.visit(leader+"/ui/servers", "servers")
	if n := b.count("tr.server"); n != 3 {
		t.Fatalf("servers: %d rows, want 3", n)
	}
	b.run("open rs1", chromedp.Click(chromedp.CSS(`tr.server[data-id="rs1"] a`)), chromedp.WaitVisible(chromedp.CSS("#lease-state")))
	b.done("server")
	b.visit(leader+"/ui/tables", "tables")
	b.run("open t1's regions", chromedp.Click(chromedp.CSS(`tr.table[data-name="default:t1"] a`)), chromedp.WaitVisible(chromedp.CSS("#regions-table")))
	if n := b.count("tr.region"); n != 4 {
		t.Fatalf("t1's regions: %d rows, want 4", n)
	}
	b.done("regions")

	// The repair kit, in the browser: each action shows the leader's dry
	// run before asking to confirm.
	b.repairs(f, leader)

	// A standby shows what the leader holds, and says whose it is.
	standby := "http://" + f.standby.HTTPAddr()
	b.visit(standby+"/", "standby-overview")
	if role := b.text("#node-role"); role != "standby" {
		t.Fatalf("standby: role %q", role)
	}
	if foot := b.text("footer"); !strings.Contains(foot, "read from "+f.leader.ID) {
		t.Fatalf("standby: footer %q, want reads from the leader %s", foot, f.leader.ID)
	}

	// Cut off, it shows its own state as stale, and links to the leader.
	f.c.Partition(f.standby.Index())
	f.c.WaitFor("the cut-off standby to know no leader", func() bool {
		st, err := f.standby.Admin().ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
		return err == nil && st.GetLeaderId() == ""
	})
	b.visit(standby+"/ui/procedures", "stale-procedures")
	if banner := b.text("#stale-banner"); !strings.Contains(banner, "stale as of") {
		t.Fatalf("cut-off standby: banner %q", banner)
	}
	b.run("follow the stale banner to the leader", chromedp.Click(chromedp.CSS("#stale-leader-link")),
		chromedp.WaitVisible(chromedp.CSS("#node-role")))
	if role, p := b.text("#node-role"), b.path(); role != "leader" || !strings.HasPrefix(p, leader) {
		t.Fatalf("the stale banner's link led to %s (%s)", p, role)
	}
	b.done("leader-from-stale")
	t.Logf("cluster and browser checks took %v", time.Since(started).Round(time.Millisecond))
}

// repairs drives the repair kit's pages: the guarded bypass (refused, then
// asked again with recursive, then confirmed), a refused region assign and
// server recovery, a cancel by filter, maintenance mode on (its banner on
// another page) and off, and the repairs page listing what was done.
func (b *browser) repairs(f *fixture, leader string) {
	t := b.t
	t.Helper()
	ctx := context.Background()
	fan := fmt.Sprint(f.fanoutID)

	b.visit(leader+"/ui/procedures/"+fan, "bypass-start")
	b.run("ask for the bypass", chromedp.Click(chromedp.CSS("#bypass-button")), chromedp.WaitVisible(chromedp.CSS("#dry-run-refusal")))
	if r := b.text("#dry-run-reason"); !strings.Contains(r, "unfinished children") {
		t.Fatalf("bypass without recursive: refusal %q", r)
	}
	if n := b.count("#confirm-form"); n != 0 {
		t.Fatal("a refused bypass offers to confirm")
	}
	b.done("bypass-refused")
	b.run("ask again with recursive", chromedp.Click(chromedp.CSS("#opt-recursive")), chromedp.Click(chromedp.CSS("#dry-run-button")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	if s := b.text("#dry-run-summary"); !strings.Contains(s, "bypass procedure "+fan) || !strings.Contains(s, "3 unfinished descendants") {
		t.Fatalf("bypass dry run: %q", s)
	}
	b.done("bypass-confirm")
	if p, err := f.cl.Get(ctx, f.fanoutID); err != nil || client.Terminal(p.GetState()) {
		t.Fatalf("the dry run bypassed already: %v %v", p.GetState(), err)
	}
	b.run("confirm the bypass", chromedp.Click(chromedp.CSS("#confirm-box")), chromedp.Click(chromedp.CSS("#confirm-button")),
		chromedp.WaitVisible(chromedp.CSS("#repair-flash")))
	if s := b.text("#repair-flash"); !strings.Contains(s, "proc bypass: done") {
		t.Fatalf("after the bypass: %q", s)
	}
	b.done("bypassed")
	if p, err := f.cl.Wait(ctx, f.fanoutID); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("after the console's bypass: %v %v, want SUCCESS", p.GetState(), err)
	}

	// A region of t1, locked by alice: the leader refuses, saying so.
	b.visit(leader+"/ui/regions?table=default:t1", "regions-with-actions")
	b.run("ask to assign a region", chromedp.Click(chromedp.CSS("a.assign-link")), chromedp.WaitVisible(chromedp.CSS("#dry-run")))
	if r := b.text("#dry-run-reason"); !strings.Contains(r, "is locked by procedure "+fmt.Sprint(f.lockID)) {
		t.Fatalf("assign of a locked region: refusal %q", r)
	}
	b.done("region-assign-confirm")
	b.visit(leader+"/ui/servers/rs1", "server-with-actions")
	b.run("ask to recover rs1", chromedp.Click(chromedp.CSS("#recover-button")), chromedp.WaitVisible(chromedp.CSS("#dry-run")))
	if r := b.text("#dry-run-reason"); !strings.Contains(r, "is live") {
		t.Fatalf("recovery of a live server: refusal %q", r)
	}
	b.done("server-recover-confirm")

	// Cancel what a filter lists.
	id, err := f.cl.Submit(ctx, "sleep", map[string]string{"steps": "3", "delay": "1h"}, "", "to-cancel", 0)
	if err != nil {
		t.Fatal(err)
	}
	b.visit(leader+"/ui/procedures?owner=to-cancel", "procedures-filtered")
	b.run("ask to cancel the matching", chromedp.Click(chromedp.CSS("#cancel-matching")), chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	if n := b.count(fmt.Sprintf(`tr.would-cancel[data-id="%d"]`, id)); n != 1 {
		t.Fatalf("cancel dry run: the sleep listed %d times", n)
	}
	b.done("cancel-confirm")
	b.run("confirm the cancel", chromedp.Click(chromedp.CSS("#confirm-box")), chromedp.Click(chromedp.CSS("#confirm-button")),
		chromedp.WaitVisible(chromedp.CSS("#repair-flash")))
	b.done("cancelled")
	if p, err := f.cl.Wait(ctx, id); err != nil || p.GetState() != client.StateRolledBack {
		t.Fatalf("after the console's cancel: %v %v, want ROLLEDBACK", p.GetState(), err)
	}

	// Maintenance mode on, with a reason typed in the confirmation; its
	// banner on another page; off.
	const reason = "replacing rs2's disk"
	b.visit(leader+"/", "overview-maintenance-off")
	b.run("ask to turn maintenance mode on", chromedp.Click(chromedp.CSS("#maintenance-on")), chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	b.run("give a reason", chromedp.SendKeys(chromedp.CSS("#opt-reason"), reason))
	b.done("maintenance-confirm")
	b.run("confirm maintenance on", chromedp.Click(chromedp.CSS("#confirm-box")), chromedp.Click(chromedp.CSS("#confirm-button")),
		chromedp.WaitVisible(chromedp.CSS("#maintenance-banner")))
	b.done("maintenance-on")
	if m, err := f.cl.GetMaintenance(ctx); err != nil || !m.GetOn() || m.GetReason() != reason {
		t.Fatalf("maintenance after the console turned it on: %v %v", m, err)
	}
	b.visit(leader+"/ui/locks", "maintenance-banner")
	if s := b.text("#maintenance-banner"); !strings.Contains(s, reason) || !strings.Contains(s, "console@"+f.leader.ID) {
		t.Fatalf("the banner on the locks page: %q", s)
	}
	b.visit(leader+"/", "overview-maintenance-on")
	b.run("ask to turn maintenance mode off", chromedp.Click(chromedp.CSS("#maintenance-off")), chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	b.run("confirm maintenance off", chromedp.Click(chromedp.CSS("#confirm-box")), chromedp.Click(chromedp.CSS("#confirm-button")),
		chromedp.WaitVisible(chromedp.CSS("#maintenance-on")))
	if n := b.count("#maintenance-banner"); n != 0 {
		t.Fatal("the maintenance banner outlives maintenance mode")
	}
	b.done("maintenance-off")

	b.run("open the repairs", chromedp.Click(chromedp.CSS("#nav-repairs")), chromedp.WaitVisible(chromedp.CSS("#repairs-table")))
	if n := b.count("tr.repair"); n != 4 {
		t.Fatalf("repairs page: %d records, want the bypass, the cancel, maintenance on and off", n)
	}
	b.done("repairs")
}
