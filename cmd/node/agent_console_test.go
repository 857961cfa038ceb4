package main

import (
	"net/http"
	"regexp"
	"testing"
)

// The agent's console answers to the names --http-allowed-hosts gives it,
// besides its addresses', and refuses others (DNS rebinding).
func TestAgentConsoleAnswersToItsConfiguredNames(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "0", "--http-allowed-hosts", "console.lan")
	m := regexp.MustCompile(`console: +http://(\S+)/`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner names no console:\n%s", banner)
	}
	for host, want := range map[string]int{m[1]: http.StatusOK, "console.lan:7072": http.StatusOK, "localhost": http.StatusOK, "evil.example": http.StatusForbidden} {
		if code := getWithHost(t, "http://"+m[1]+"/ui/static/console.css", host); code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
	}
	stop()
}

// Every path of a node's HTTP port, not the console's alone, refuses a
// Host that is not one of the node's names: a DNS-rebinding page could
// otherwise read /status, /metrics and the whole state in /debug/domain.
// The dev region servers' HTTP ports do the same.
func TestEveryHTTPPathRefusesAForeignHost(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "1", "--debug-endpoints")
	m := regexp.MustCompile(`console: +http://(\S+)/`).FindStringSubmatch(banner)
	rs := regexp.MustCompile(`metrics (http://\S+)/metrics`).FindStringSubmatch(banner)
	if m == nil || rs == nil {
		t.Fatalf("the banner names no console or region server:\n%s", banner)
	}
	for _, url := range []string{"http://" + m[1] + "/status", "http://" + m[1] + "/metrics", "http://" + m[1] + "/readyz",
		"http://" + m[1] + "/debug/pprof/", "http://" + m[1] + "/debug/pprof/cmdline", "http://" + m[1] + "/debug/domain?prefix=acl/",
		"http://" + m[1] + "/ui/procedures", "http://" + m[1] + "/nope", rs[1] + "/metrics", rs[1] + "/readyz"} {
		if code := getWithHost(t, url, "evil.example"); code != http.StatusForbidden {
			t.Errorf("GET %s with Host evil.example: %d, want 403", url, code)
		}
		if code := getWithHost(t, url, "localhost"); code == http.StatusForbidden {
			t.Errorf("GET %s with Host localhost: 403", url)
		}
	}
	stop()
}

// /debug/pprof and /debug/domain are served only with --debug-endpoints.
func TestDebugEndpointsAreOffByDefault(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "0")
	m := regexp.MustCompile(`console: +http://(\S+)/`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner names no console:\n%s", banner)
	}
	for path, want := range map[string]int{"/debug/pprof/": http.StatusNotFound, "/debug/pprof/cmdline": http.StatusNotFound,
		"/debug/domain": http.StatusNotFound, "/status": http.StatusOK} {
		resp, err := http.Get("http://" + m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	stop()
}

// getWithHost GETs url with the Host header host and returns the status.
func getWithHost(t *testing.T, url, host string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
