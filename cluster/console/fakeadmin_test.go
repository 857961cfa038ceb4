package console_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/proto/adminpb"
)

// hostile is text an operator's input or a procedure's data can carry into
// the console (a type name, an owner, a lock's name, an error, a reason).
const hostile = `"><script>alert(1)</script><a href="javascript:alert(2)">`

// invisible is text a record stored before identifiers were checked can
// hold: a right-to-left override, a zero-width space and a terminal
// escape, which html/template passes through as they are.
const invisible = "\u202e\u200b\x1b[31m"

// fakeAdmin is an admin API that leads, holds procedure 7 (whose every
// string is hostile) waiting behind a lock, and counts the aborts asked of
// it: the console's pages without a cluster.
type fakeAdmin struct {
	adminpb.UnimplementedAdminServer
	aborts atomic.Int32
}

func (f *fakeAdmin) ClusterStatus(context.Context, *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	return &adminpb.ClusterStatusResponse{NodeId: "m1", State: "Leader", LeaderId: "m1", Term: 3}, nil
}

func (f *fakeAdmin) proc(id uint64) *adminpb.Procedure {
	return &adminpb.Procedure{Id: id, RootId: id, Type: hostile, State: "WAITING", Owner: hostile + invisible, Nonce: hostile,
		WaitingFor: hostile, Error: hostile, ErrorCode: hostile, Data: []byte(`{"Name":"` + strings.ReplaceAll(hostile, `"`, `\"`) + `"}`),
		Read: &adminpb.ReadInfo{ServedBy: "m1", Consistency: adminpb.Consistency_LINEARIZABLE}}
}

func (f *fakeAdmin) GetProcedure(_ context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	if req.GetId() != 7 {
		return nil, status.Errorf(codes.NotFound, "no procedure %d", req.GetId())
	}
	return f.proc(7), nil
}

func (f *fakeAdmin) ListProcedures(_ context.Context, req *adminpb.ListProceduresRequest) (*adminpb.ListProceduresResponse, error) {
	return &adminpb.ListProceduresResponse{Procedures: []*adminpb.Procedure{f.proc(7)}, Read: &adminpb.ReadInfo{ServedBy: "m1"}}, nil
}

func (f *fakeAdmin) ListLocks(context.Context, *adminpb.ListLocksRequest) (*adminpb.ListLocksResponse, error) {
	party := func(id uint64) *adminpb.LockParty {
		return &adminpb.LockParty{ProcId: id, Type: hostile, State: "WAITING", WaitingFor: hostile, Holder: hostile + invisible, Description: hostile + invisible, External: id == 8, Mode: "exclusive"}
	}
	return &adminpb.ListLocksResponse{Locks: []*adminpb.LockEntry{{Kind: "TABLE", Name: hostile, Holders: []*adminpb.LockParty{party(8)}, Waiters: []*adminpb.LockParty{party(7)}}}}, nil
}

func (f *fakeAdmin) ListServers(context.Context, *adminpb.ListServersRequest) (*adminpb.ListServersResponse, error) {
	return &adminpb.ListServersResponse{}, nil
}

func (f *fakeAdmin) ServerRegions(_ context.Context, req *adminpb.ServerRegionsRequest) (*adminpb.ServerRegionsResponse, error) {
	return nil, status.Errorf(codes.NotFound, "no region server %q", req.GetServer())
}

func (f *fakeAdmin) ListRegions(context.Context, *adminpb.ListRegionsRequest) (*adminpb.ListRegionsResponse, error) {
	return &adminpb.ListRegionsResponse{}, nil
}

func (f *fakeAdmin) AbortProcedure(_ context.Context, ref *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	f.aborts.Add(1)
	p := f.proc(ref.GetId())
	p.AbortRequested = true
	return p, nil
}

// newFakeConsole serves a console reading fakeAdmin.
func newFakeConsole(t *testing.T) (*fakeAdmin, *httptest.Server) {
	t.Helper()
	f := &fakeAdmin{}
	return f, consoleOver(t, f)
}

// consoleOver serves a console reading admin, until the test ends.
func consoleOver(t *testing.T, admin adminpb.AdminServer) *httptest.Server {
	return consoleOverWith(t, admin, nil)
}

// consoleOverWith is consoleOver with the console's handler wrapped by
// wrap (if not nil): what a master puts in front of it.
func consoleOverWith(t *testing.T, admin adminpb.AdminServer, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	adminpb.RegisterAdminServer(gs, admin)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	con, err := console.New(console.Config{AdminAddr: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	var h http.Handler = con
	if wrap != nil {
		h = wrap(con)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Hostile strings in a procedure, a lock and a listing are shown as text:
// no script element, no javascript: link, on any page.
func TestHostileDataIsEscaped(t *testing.T) {
	_, srv := newFakeConsole(t)
	for _, path := range []string{"/ui/procedures/7", "/ui/procedures/7/abort", "/ui/procedures", "/ui/locks", "/ui/procedures/7/bypass"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		resp, body := fetch(t, req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, body)
		}
		low := strings.ToLower(body)
		if strings.Contains(low, "<script") || strings.Contains(low, `href="javascript:`) {
			t.Errorf("GET %s: hostile markup rendered as markup", path)
		}
		if strings.ContainsAny(body, "\u202e\u200b\x1b") {
			t.Errorf("GET %s: a control or invisible character shown raw", path)
		}
	}
}

// The confirmation pages (abort, bypass, repairs) must not be framed by
// another site: a framed confirmation is one an operator can be tricked
// into clicking (clickjacking), and CrossOriginProtection lets its POST
// through, since the framed form posts from the console's own origin.
func TestConfirmationPagesForbidFraming(t *testing.T) {
	_, srv := newFakeConsole(t)
	for _, path := range []string{"/ui/procedures/7/abort", "/ui/procedures/7/bypass?override=1&recursive=1", "/ui/maintenance?on=1"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		resp, _ := fetch(t, req)
		xfo := resp.Header.Get("X-Frame-Options")
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.EqualFold(xfo, "DENY") && !strings.EqualFold(xfo, "SAMEORIGIN") && !strings.Contains(csp, "frame-ancestors") {
			t.Errorf("GET %s: framable (X-Frame-Options %q, Content-Security-Policy %q)", path, xfo, csp)
		}
	}
}

// A browser page of another site whose name was rebound to the console's
// address (DNS rebinding) posts "same-origin" as far as the browser knows:
// only the Host header tells. An action must be refused when Host is not
// one of the console's own names.
func TestActionRefusesForeignHost(t *testing.T) {
	f, srv := newFakeConsole(t)
	form := url.Values{"confirm": {"yes"}}.Encode()
	req, _ := http.NewRequest("POST", srv.URL+"/ui/procedures/7/abort", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Host = "attacker.example:8080"
	req.Header.Set("Origin", "http://attacker.example:8080")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, _ := fetch(t, req)
	if n := f.aborts.Load(); n != 0 || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST with Host attacker.example: %d, %d aborts; want 403 and none", resp.StatusCode, n)
	}
}

// Bad input in the URL is a 4xx page, never a 5xx or a panic; an unknown
// subject is 404 on every page about one subject.
func TestBadParamsAre4xxAndUnknownSubjects404(t *testing.T) {
	_, srv := newFakeConsole(t)
	for path, want := range map[string]int{
		"/ui/procedures/abc":                   http.StatusBadRequest,
		"/ui/procedures/0":                     http.StatusBadRequest,
		"/ui/procedures/-1":                    http.StatusBadRequest,
		"/ui/procedures/18446744073709551616":  http.StatusBadRequest,
		"/ui/procedures/8":                     http.StatusNotFound,
		"/ui/procedures/abc/abort":             http.StatusBadRequest,
		"/ui/procedures?id=abc":                http.StatusBadRequest,
		"/ui/procedures?after=99999999999999h": http.StatusBadRequest,
		"/ui/repairs?after=x":                  http.StatusBadRequest,
		"/ui/procedures/abc/bypass":            http.StatusBadRequest,
		"/ui/servers/nope":                     http.StatusNotFound,
	} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		resp, body := fetch(t, req)
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d\n%.300s", path, resp.StatusCode, want, body)
		}
	}
}

// standbyAdmin is a standby (m2) whose leader (m1) answers the first read
// of a page and is gone by the next: procedure 7 comes from m1, its child
// 8 only from m2's own state, at STALE.
type standbyAdmin struct{ fakeAdmin }

func (f *standbyAdmin) ClusterStatus(context.Context, *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	return &adminpb.ClusterStatusResponse{NodeId: "m2", State: "Follower", LeaderId: "m1", Term: 3, AppliedIndex: 40}, nil
}

func (f *standbyAdmin) GetProcedure(_ context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	switch {
	case req.GetId() == 7:
		return &adminpb.Procedure{Id: 7, RootId: 7, Type: "parent", State: "WAITING", Children: []uint64{8},
			Read: &adminpb.ReadInfo{ServedBy: "m1", AppliedIndex: 99, Consistency: adminpb.Consistency_LINEARIZABLE}}, nil
	case req.GetId() == 8 && req.GetConsistency() == adminpb.Consistency_STALE:
		return &adminpb.Procedure{Id: 8, RootId: 7, ParentId: 7, Type: "child", State: "RUNNABLE",
			Read: &adminpb.ReadInfo{ServedBy: "m2", AppliedIndex: 40, Consistency: adminpb.Consistency_STALE}}, nil
	case req.GetId() == 8:
		return nil, status.Error(codes.Unavailable, "admin: forwarding to m1: connection refused")
	}
	return nil, status.Errorf(codes.NotFound, "no procedure %d", req.GetId())
}

// A page part of which was read at STALE from this node says so, naming
// this node and its applied index, not the leader that answered the reads
// before it went away.
func TestStaleBannerNamesTheNodeWhoseStateIsShown(t *testing.T) {
	srv := consoleOver(t, &standbyAdmin{})
	req, _ := http.NewRequest("GET", srv.URL+"/ui/procedures/7", nil)
	resp, body := fetch(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d\n%s", resp.StatusCode, body)
	}
	banner := between(body, `id="stale-banner">`, "</div>")
	if banner == "" {
		t.Fatalf("child 8 read at STALE from m2, and no stale banner")
	}
	if !strings.Contains(banner, "m2's own state (applied index 40)") {
		t.Errorf("stale banner names the wrong node or index:\n%s", banner)
	}
	if strings.Contains(body, "(linearizable)") {
		t.Errorf("footer claims a linearizable read on a page with stale parts")
	}
}

// The console answers to IP addresses, localhost, its admin address's
// host and the names it is given, in any case and with a trailing dot,
// and refuses every other name, on pages and static files alike.
func TestConsoleAnswersOnlyToItsOwnNames(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	adminpb.RegisterAdminServer(gs, &fakeAdmin{})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	con, err := console.New(console.Config{AdminAddr: lis.Addr().String(), AllowedHosts: []string{"console.lan", "Master1:7072", ":7072"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	for host, want := range map[string]int{
		"127.0.0.1:8080":               http.StatusOK,
		"[::1]:8080":                   http.StatusOK,
		"10.1.2.3":                     http.StatusOK,
		"localhost:8080":               http.StatusOK,
		"LocalHost.":                   http.StatusOK,
		"console.lan":                  http.StatusOK,
		"CONSOLE.LAN.:80":              http.StatusOK,
		"master1:7072":                 http.StatusOK,
		"attacker.example:8080":        http.StatusForbidden,
		"127.0.0.1.attacker.example":   http.StatusForbidden,
		"localhost.attacker.example":   http.StatusForbidden,
		"console.lan.attacker.example": http.StatusForbidden,
	} {
		for _, path := range []string{"/ui/static/console.css", "/ui/procedures/7"} {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			req.Host = host
			resp, body := fetch(t, req)
			if resp.StatusCode != want {
				t.Errorf("GET %s with Host %s: %d, want %d\n%.300s", path, host, resp.StatusCode, want, body)
			}
			if want == http.StatusForbidden && !strings.Contains(body, "is not a name of this node") {
				t.Errorf("GET %s with Host %s: the refusal does not say why:\n%s", path, host, body)
			}
		}
	}

	// The admin address's host is one of the node's names: a container's,
	// in the compose cluster.
	named, err := console.New(console.Config{AdminAddr: "master2:7070"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { named.Close() })
	req := httptest.NewRequest("GET", "http://master2:7072/ui/static/console.css", nil)
	rec := httptest.NewRecorder()
	named.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("GET with the admin address's host: %d", rec.Code)
	}
	if _, err := console.New(console.Config{AdminAddr: "master2:7070", AllowedHosts: []string{"http://x/"}}); err == nil || !strings.Contains(err.Error(), "not a host name") {
		t.Errorf("an allowed host that is a URL: %v, want an error saying it is not a host name", err)
	}
}

// Every console response, pages, static files, errors and refusals,
// forbids framing by any site and content sniffing.
func TestEveryResponseForbidsFramingAndSniffing(t *testing.T) {
	_, srv := newFakeConsole(t)
	crossSite, _ := http.NewRequest("POST", srv.URL+"/ui/procedures/7/abort", strings.NewReader("confirm=yes"))
	crossSite.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	crossSite.Header.Set("Sec-Fetch-Site", "cross-site")
	foreign, _ := http.NewRequest("GET", srv.URL+"/", nil)
	foreign.Host = "attacker.example"
	reqs := []*http.Request{crossSite, foreign}
	for _, path := range []string{"/", "/ui/procedures/7", "/ui/static/console.css", "/ui/nope", "/ui/procedures/abc"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		reqs = append(reqs, req)
	}
	for _, req := range reqs {
		resp, _ := fetch(t, req)
		what := fmt.Sprintf("%s %s (Host %s, %d)", req.Method, req.URL.Path, req.Host, resp.StatusCode)
		if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options %q, want DENY", what, got)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", what, csp)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", what, got)
		}
	}
}
