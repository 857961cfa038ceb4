package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
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
	snapDir := filepath.Join(t.TempDir(), "snaps")
	admin, banner, _ := startDevAgent(t, "--snapshot-interval", "1h", "--snapshot-dir", snapDir)
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
		for _, want := range []string{"# TYPE go_goroutines gauge", "# TYPE baton_", "# TYPE baton_snapshot_last_success_index gauge", "# TYPE baton_snapshot_failures_total counter"} {
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
	// The single master leads: its first scheduled snapshot is there, and
	// `snapshot inspect` accepts it.
	var snaps []string
	testwait.For(t, 30*time.Second, "a scheduled snapshot in "+snapDir, func() bool {
		snaps, _ = filepath.Glob(filepath.Join(snapDir, "baton-*.snap"))
		return len(snaps) == 1
	})
	if code, stdout, stderr := runCLI(t, nil, "snapshot", "inspect", snaps[0]); code != 0 || !strings.Contains(stdout, "good (checksum and structure verified)") {
		t.Errorf("snapshot inspect %s: exit %d\n%s\n%s", snaps[0], code, stdout, stderr)
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

// TestAgentExportsTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, the agent
// says tracing is on and a table create's spans reach the collector (an
// OTLP/HTTP endpoint that counts what it is sent), at the latest when the
// agent stops and flushes them.
func TestAgentExportsTraces(t *testing.T) {
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	admin, banner, stop := startDevAgent(t)
	if !strings.Contains(banner, "traces:           OTLP (http/protobuf)") {
		t.Errorf("banner does not say tracing is on:\n%s", banner)
	}
	if code, stdout, stderr := runCLI(t, nil, "table", "create", "t1", "--regions", "2", "--wait", "--timeout", "60s", "--addr", admin); code != 0 {
		t.Fatalf("table create: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stop()
	if posts.Load() == 0 {
		t.Error("no spans reached the collector")
	}
}

// TestAgentRefusesBadTracingConfig: an OTEL_* value Baton cannot honour
// stops the agent at start, naming it.
func TestAgentRefusesBadTracingConfig(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	args, _ := devArgs(t)
	code, _, stderr := runCLI(t, nil, args...)
	if code != exitFailed || !strings.Contains(stderr, "OTEL_TRACES_EXPORTER") {
		t.Fatalf("exit %d, stderr %q: want %d naming OTEL_TRACES_EXPORTER", code, stderr, exitFailed)
	}
}
