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
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Every page answers 200 with what the cluster holds, on the leader and on
// a standby (which shows the leader's state), and the node's own
// endpoints still answer beside the console. No browser: the pages'
// content and the abort's guard are checked here even where Chromium is
// missing.
func TestPagesShowTheCluster(t *testing.T) {
	f := newFixture(t)
	sleep, disable, create, lock := fmt.Sprint(f.sleepID), fmt.Sprint(f.disableID), fmt.Sprint(f.createID), fmt.Sprint(f.lockID)
	// The description is escaped wherever it shows.
	escaped := html.EscapeString(lockPurpose)
	// More procedures than a page holds (50), finished at once.
	ctx := context.Background()
	var last uint64
	for range 55 {
		id, err := f.cl.Submit(ctx, "sleep", map[string]string{"steps": "0"}, "", "filler", 0)
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	if _, err := f.cl.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who  string
		role string
	}{{"leader", "leader"}, {"standby", "standby"}} {
		m := f.leader
		if tc.who == "standby" {
			m = f.standby
		}
		t.Run(tc.who, func(t *testing.T) {
			page := func(path string, wants ...string) string {
				t.Helper()
				code, body := get(t, m, path)
				if code != http.StatusOK {
					t.Fatalf("GET %s: %d\n%s", path, code, body)
				}
				// Every page names the node serving it, and its role; reads
				// are answered by the leader.
				mustContain(t, path, body, append(wants, `id="node-id">`+m.ID+"<", `id="node-role">`+tc.role+"<",
					"read from "+f.leader.ID)...)
				if strings.Contains(body, "stale-banner") {
					t.Fatalf("GET %s: a stale banner while a leader answers", path)
				}
				return body
			}
			body := page("/", "Masters", "Region servers", "WAITING_TIMEOUT", "SUCCESS", `>live</span> 3`, "WAL")
			for _, mm := range f.c.Masters() {
				mustContain(t, "/", body, `data-id="`+mm.ID+`"`, mm.HTTPAddr())
			}
			if strings.Contains(body, "No quorum") {
				t.Fatal("overview: no-quorum alert with every master up")
			}
			if tc.who == "standby" {
				mustContain(t, "/", body, `id="leader-console"`, "http://"+f.leader.HTTPAddr()+"/")
			}

			// Newest first by default: the last filler leads.
			body = page("/ui/procedures", `data-id="`+fmt.Sprint(last)+`"`, "filler")
			if i := strings.Index(body, `class="proc" data-id="`); i < 0 || !strings.HasPrefix(body[i:], `class="proc" data-id="`+fmt.Sprint(last)+`"`) {
				t.Fatalf("procedures: not newest first")
			}
			// Pages: 50 a page, and the 55 fillers make more than one.
			body = page("/ui/procedures?order=oldest", `data-id="`+sleep+`" data-state="WAITING_TIMEOUT"`, `data-id="`+create+`"`, sleepOwner, `id="next-page"`)
			next := hrefOf(body, "next-page")
			page(html.UnescapeString(next), "first page", `data-id="`+fmt.Sprint(last)+`"`)
			// Filters are the API's: by owner, state, type, time, order.
			body = page("/ui/procedures?owner="+sleepOwner, `data-id="`+sleep+`"`)
			if strings.Contains(body, `data-id="`+create+`"`) {
				t.Fatal("owner filter let another owner's procedure through")
			}
			page("/ui/procedures?type=CreateTable&state=SUCCESS&roots=1&order=oldest&after=1h", `data-id="`+create+`"`)
			page("/ui/procedures?state=SUCCESS&before=2000-01-01", "No procedure matches")
			if code, body := get(t, m, "/ui/procedures?after=yesterday"); code != http.StatusBadRequest || !strings.Contains(body, "is not a time") {
				t.Fatalf("a bad time bound: %d, want 400 saying why", code)
			}
			// A search by id goes to the procedure.
			resp, err := http.Get("http://" + m.HTTPAddr() + "/ui/procedures?id=" + sleep)
			if err != nil || resp.Request.URL.Path != "/ui/procedures/"+sleep {
				t.Fatalf("search by id: %v %v", resp.Request.URL, err)
			}
			resp.Body.Close()

			page("/ui/procedures/"+sleep, `id="proc-state">WAITING_TIMEOUT<`, sleepOwner, `&#34;Steps&#34;: 3`, "Timeline",
				`class="transition"`, `id="abort-link"`, "It holds no lock and waits for none")
			page("/ui/procedures/"+create, "CreateTable", `class="current"`, "Masters that wrote it", "SUCCESS")
			// A tree: the parent and its children, from the parent's page and
			// from a child's.
			fan, err := f.cl.Get(context.Background(), f.fanoutID)
			if err != nil {
				t.Fatal(err)
			}
			kids := fan.GetChildren()
			body = page("/ui/procedures/"+fmt.Sprint(f.fanoutID), "fanout", "waiting for children")
			tree := between(body, `<section id="tree">`, "</section>")
			for _, k := range kids {
				mustContain(t, "fanout's tree", tree, fmt.Sprintf(`href="/ui/procedures/%d"`, k))
			}
			body = page(fmt.Sprintf("/ui/procedures/%d", kids[1]), "root <a href=\"/ui/procedures/"+fmt.Sprint(f.fanoutID))
			tree = between(body, `<section id="tree">`, "</section>")
			mustContain(t, "a child's tree", tree, fmt.Sprintf(`<li class="current">
  <a href="/ui/procedures/%d">`, kids[1]), fmt.Sprintf(`href="/ui/procedures/%d"`, kids[0]))
			page("/ui/procedures/"+disable, "DisableTable", "Awaited", "default:t1", "external lock of "+lockHolder)
			page("/ui/procedures/"+lock, "Held", "default:t1", lockHolder, "maintenance", "1 waiting behind it")

			body = page("/ui/locks", `data-name="default:t1"`, lockHolder, escaped, "Who blocks whom", "at the end of the line")
			chain := between(body, `<li class="chain">`, "</li>")
			mustContain(t, "the chain", chain, `data-id="`+disable+`"`, `data-id="`+lock+`"`, lockHolder)
			if strings.Contains(body, lockPurpose) {
				t.Fatal("locks: the holder's description is not escaped")
			}

			page("/ui/servers", `data-id="rs1"`, `data-id="rs2"`, `data-id="rs3"`, "live", "soft limit")
			page("/ui/servers/rs1", "Hosted regions", `id="lease-state">live<`)
			page("/ui/tables", `data-name="default:t1"`, "ENABLED")
			page("/ui/regions?table=default:t1", "4 regions on this page", "default:t1")
			page("/ui/regions?table=default:t1&state=CLOSED", "No region matches")

			// The node's own endpoints are still there.
			for path, want := range map[string]string{"/status": `"id": "` + m.ID + `"`, "/readyz": "ready", "/metrics": "# HELP"} {
				code, body := get(t, m, path)
				if code != http.StatusOK || !strings.Contains(body, want) {
					t.Fatalf("GET %s: %d, %q missing", path, code, want)
				}
			}
			if code, _ := get(t, m, "/ui/nothing"); code != http.StatusNotFound {
				t.Fatalf("an unknown page: %d, want 404", code)
			}
			if code, _ := get(t, m, "/ui/procedures/99999"); code != http.StatusNotFound {
				t.Fatalf("an unknown procedure: %d, want 404", code)
			}
		})
	}

	// The abort: its GET only asks; a POST without the confirmation only
	// asks again; a confirmed POST (to the standby's console, which
	// forwards) aborts.
	abortURL := "http://" + f.standby.HTTPAddr() + "/ui/procedures/" + sleep + "/abort"
	code, body := get(t, f.standby, "/ui/procedures/"+sleep+"/abort")
	mustContain(t, "confirm page", body, `id="confirm-box"`, `method="post"`)
	if code != http.StatusOK {
		t.Fatalf("confirmation page: %d", code)
	}
	resp, err := http.PostForm(abortURL, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unconfirmed abort: %d, want 400", resp.StatusCode)
	}
	if p, err := f.cl.Get(ctx, f.sleepID); err != nil || p.GetAbortRequested() || p.GetState() != client.StateWaitingTimeout {
		t.Fatalf("after an unconfirmed abort: %v %v", p, err)
	}
	resp, err = http.PostForm(abortURL, url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/procedures/"+sleep || resp.Request.URL.Query().Get("done") != "abort" {
		t.Fatalf("confirmed abort: %d at %v", resp.StatusCode, resp.Request.URL)
	}
	if p, err := f.cl.Wait(ctx, f.sleepID); err != nil || p.GetState() != client.StateRolledBack {
		t.Fatalf("after the abort: %v %v, want ROLLEDBACK", p.GetState(), err)
	}
	// A second one finds nothing to abort.
	resp, err = http.PostForm(abortURL, url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("abort of a finished procedure: %d, want 409", resp.StatusCode)
	}
	// A cross-site form cannot abort.
	req, _ := http.NewRequest(http.MethodPost, abortURL, strings.NewReader("confirm=yes"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST: %v %v, want 403", resp.StatusCode, err)
	}
}

// Pages that show changing state reload themselves; those with a form do
// not (a reload would lose what is typed).
func TestRefresh(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	con, err := console.New(console.Config{AdminAddr: c.Master(0).AdminAddr(), Refresh: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	for path, refresh := range map[string]bool{"/": true, "/ui/locks": true, "/ui/servers": true, "/ui/procedures": false, "/ui/regions": true,
		"/ui/repairs": true, "/ui/maintenance?on=1": false} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, body)
		}
		if got := strings.Contains(string(body), `<meta http-equiv="refresh" content="2">`); got != refresh {
			t.Errorf("GET %s: reloads itself %v, want %v", path, got, refresh)
		}
	}
	if _, err := console.New(console.Config{}); err == nil {
		t.Error("a console without an admin address")
	}
}

// between returns the text of s after the first from, up to the next to.
func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// hrefOf is the link of the element with this id.
func hrefOf(body, id string) string {
	end := strings.Index(body, `" id="`+id+`"`)
	if end < 0 {
		return ""
	}
	start := strings.LastIndex(body[:end], `href="`)
	if start < 0 {
		return ""
	}
	return body[start+len(`href="`) : end]
}

// A standby cut off from the others shows its own state, saying it is
// stale, as of when, and where the leader's console is; what only the
// leader holds (locks, leases) it says it cannot show.
func TestCutOffStandbyShowsStaleState(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// What the page should show must have reached the standby before it
	// is cut off: the fixture waits for the leader's state, not for the
	// standby to apply it.
	f.c.WaitFor("the standby to apply the sleep's wait", func() bool {
		p, err := f.standby.Admin().GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: f.sleepID, Consistency: adminpb.Consistency_STALE})
		return err == nil && p.GetState() == client.StateWaitingTimeout
	})
	f.c.Partition(f.standby.Index())
	f.c.WaitFor("the cut-off standby to know no leader", func() bool {
		st, err := f.standby.Admin().ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
		return err == nil && st.GetLeaderId() == ""
	})
	leaderURL := "http://" + f.leader.HTTPAddr() + "/"
	for path, wants := range map[string][]string{
		// The region servers it recorded, their leases unknown (only a
		// leader keeps them).
		"/":              {"No leader is known to " + f.standby.ID, "unknown"},
		"/ui/procedures": {`data-id="` + fmt.Sprint(f.sleepID) + `"`},
		"/ui/procedures/" + fmt.Sprint(f.sleepID): {"WAITING_TIMEOUT", "only the leader holds this"},
		"/ui/locks":   {"only the leader holds this"},
		"/ui/tables":  {`data-name="default:t1"`},
		"/ui/regions": {"4 regions on this page"},
	} {
		code, body := get(t, f.standby, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s on the cut-off standby: %d", path, code)
		}
		mustContain(t, path, body, append(wants, `id="stale-banner"`, "stale as of", "This page shows "+f.standby.ID+"'s own state",
			`href="`+leaderURL+`" id="stale-leader-link"`)...)
		if path != "/ui/locks" {
			mustContain(t, path, body, "read from "+f.standby.ID+" at applied index")
		}
	}
	// It offers no repair: only the leader repairs. Nothing is asked of
	// the leader, nor waited for.
	bypass := fmt.Sprintf("/ui/procedures/%d/bypass", f.sleepID)
	code, body := get(t, f.standby, bypass)
	mustContain(t, bypass, body, `id="stale-banner"`, `id="dry-run-code">UNAVAILABLE<`, "only the leader repairs, and no leader answers "+f.standby.ID)
	if code != http.StatusOK || strings.Contains(body, `id="confirm-form"`) {
		t.Fatalf("a repair on the cut-off standby: %d, or a confirmation offered", code)
	}
	resp, err := http.PostForm("http://"+f.standby.HTTPAddr()+bypass, url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a confirmed repair on the cut-off standby: %d, want 503", resp.StatusCode)
	}
	// Healed, it shows the leader's state again.
	f.c.Heal(f.standby.Index())
	f.c.WaitFor("the standby's console to read from the leader again", func() bool {
		code, body := get(t, f.standby, "/ui/procedures")
		return code == http.StatusOK && !strings.Contains(body, "stale-banner") && strings.Contains(body, "read from "+f.leader.ID)
	})
}
