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
		req, _ := http.NewRequest("GET", "http://"+m[1]+"/ui/static/console.css", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("agent exit %d", code)
	}
}
