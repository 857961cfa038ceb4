package main

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestAgentMetricsPassPromtool: what `agent --dev` serves at /metrics (the
// master's registry with the Go runtime's and the process's collectors,
// and each in-process region server's) passes `promtool check metrics`,
// after a table create made every family show.
func TestAgentMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: promtool is not installed (Debian's prometheus package: apt-get install prometheus; .ci/run installs it)")
	}
	admin, banner, _ := startDevAgent(t)
	urls := regexp.MustCompile(`http://[0-9.:]+/metrics`).FindAllString(banner, -1)
	if len(urls) != 4 {
		t.Fatalf("want the master's and 3 region servers' metrics URLs in the banner, found %v:\n%s", urls, banner)
	}
	if code, stdout, stderr := runCLI(t, nil, "table", "create", "t1", "--regions", "3", "--wait", "--timeout", "60s", "--addr", admin); code != 0 {
		t.Fatalf("table create: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, url := range urls {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %v", url, resp.Status, err)
		}
		for _, want := range []string{"# TYPE go_goroutines gauge", "# TYPE baton_"} {
			if url == urls[0] && !strings.Contains(string(body), want) {
				t.Errorf("%s lacks %q", url, want)
			}
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on %s: %v\n%s", url, err, out)
		}
	}
	rsReady := strings.Replace(urls[1], "/metrics", "/readyz", 1)
	resp, err := http.Get(rsReady)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s: %s, want 200 from a registered region server", rsReady, resp.Status)
	}
}
