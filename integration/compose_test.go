//go:build unix

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The failover demos as tests: scripts/demo-failover.sh (Docker Compose)
// and scripts/demo-local.sh (local processes). Each starts 3 masters and 3
// region servers, creates 5 tables x 8 regions, SIGKILLs the leader
// mid-way, and checks from the region servers' own answers that every
// region is open exactly once (the scripts exit non-zero otherwise). Both
// are off by default, since they take a minute or more and use fixed ports:
//
//	BATON_DEMO_LOCAL_TEST=1 go test -run TestDemoLocal -v ./integration/
//	BATON_COMPOSE_TEST=1 go test -run TestComposeFailoverDemo -v -timeout 15m ./integration/

// demoResult is the line democheck prints when every region is open once.
const demoResult = "RESULT: every region is OPEN on exactly one region server"

func TestComposeFailoverDemo(t *testing.T) {
	if os.Getenv("BATON_COMPOSE_TEST") != "1" {
		t.Skip("skipped: the docker-compose failover demo runs only with BATON_COMPOSE_TEST=1 (it needs a Docker engine with Compose, builds an image and uses host ports 18070-18272)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("skipped: BATON_COMPOSE_TEST=1 but there is no docker command on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	cancel()
	if err != nil {
		t.Skipf("skipped: BATON_COMPOSE_TEST=1 but no Docker engine answers (`docker info`: %v: %s)", err, firstLine(out))
	}
	if !composeAvailable() {
		t.Skip("skipped: BATON_COMPOSE_TEST=1 and the engine answers, but neither `docker compose` nor docker-compose is installed")
	}
	t.Logf("Docker engine %s", strings.TrimSpace(string(out)))
	if !runDemo(t, "demo-failover.sh", 12*time.Minute, nil) {
		// The script tears its cluster down on exit; in case it was
		// killed before it could, do it here.
		composeDown(t)
	}
}

// composeDown removes the demo's compose project, containers and volumes.
func composeDown(t *testing.T) {
	project := os.Getenv("DEMO_PROJECT")
	if project == "" {
		project = "baton-demo"
	}
	args := []string{"-p", project, "--project-directory", "..", "-f", filepath.Join("..", "docker-compose.yml"), "down", "-v", "--remove-orphans"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose"}, args...)...)
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() != nil {
		cmd = exec.CommandContext(ctx, "docker-compose", args...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("compose down: %v: %s", err, out)
	}
}

func TestDemoLocal(t *testing.T) {
	if os.Getenv("BATON_DEMO_LOCAL_TEST") != "1" {
		t.Skip("skipped: the local-process failover demo runs only with BATON_DEMO_LOCAL_TEST=1 (it uses ports 19010-19132, DEMO_PORT_BASE moves them)")
	}
	// The binary TestMain built (or BATON_NODE_BIN): no second build.
	runDemo(t, "demo-local.sh", 5*time.Minute, []string{"BATON_NODE_BIN=" + nodeBin})
}

func composeAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return true
	}
	_, err := exec.LookPath("docker-compose")
	return err == nil
}

// runDemo runs scripts/<script> from the repository's root with env added,
// streaming its output to the test log, and reports whether it exited 0
// having printed demoResult (else the test has failed). At the deadline
// (limit, or the test's own deadline if sooner) the script gets SIGTERM, on
// which it tears its cluster down; it is killed if it has not exited a
// minute later. The script runs in its own process group, and whatever is
// left of the group when it has exited is killed.
func runDemo(t *testing.T, script string, limit time.Duration, env []string) bool {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("skipped: no bash on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "scripts", script)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	const teardown = time.Minute
	if d, ok := t.Deadline(); ok {
		if left := time.Until(d) - teardown - 10*time.Second; left < limit {
			limit = left
		}
	}
	if limit <= 0 {
		t.Fatalf("no time left for %s before the test deadline: give go test a longer -timeout", script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = teardown
	var all bytes.Buffer
	lw := &lineLogger{t: t, all: &all}
	cmd.Stdout, cmd.Stderr = lw, lw
	start := time.Now()
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers of the group, if any
	}
	lw.flush()
	elapsed := time.Since(start).Round(time.Second)
	switch {
	case ctx.Err() != nil:
		t.Errorf("%s did not finish within %v (stopped with SIGTERM; see the log above)", script, limit)
	case err != nil:
		t.Errorf("%s failed after %v: %v (see the log above)", script, elapsed, err)
	case !strings.Contains(all.String(), demoResult):
		t.Errorf("%s exited 0 after %v without printing %q", script, elapsed, demoResult)
	default:
		t.Logf("%s passed in %v", script, elapsed)
		return true
	}
	return false
}

// lineLogger writes each complete line to the test log and keeps it all.
type lineLogger struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
	all *bytes.Buffer
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(string(l.buf))
		l.buf = nil
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
