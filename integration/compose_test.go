//go:build unix

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The failover demos as tests: scripts/demo-failover.sh (Docker Compose)
// and scripts/demo-local.sh (local processes). Each starts 3 masters and 3
// region servers, creates 5 tables x 8 regions beside a 40-step witness
// procedure, SIGKILLs the leader while procedures it wrote are half done,
// and checks from the region servers' own answers that every region is
// open exactly once (the scripts exit non-zero otherwise). The tests also
// hold the demo to what it must show: the proof (a procedure with writes
// by the killed leader and by the new one), the failover's timing, and
// nothing left behind. Both are off by default, since they take a minute
// or more and use fixed ports:
//
//	BATON_DEMO_LOCAL_TEST=1 go test -run TestDemoLocal -v ./integration/
//	BATON_COMPOSE_TEST=1 go test -run TestComposeFailoverDemo -v -timeout 15m ./integration/
//
// TestComposeStatefulSetDemo runs the same demo on the compose profile
// statefulset (masters started from StatefulSet-like names with
// --initial-cluster-size and --listen-host, no peer list), then its
// scale-up: a fourth master with the same arguments joins by itself and
// becomes a voter. It runs with BATON_COMPOSE_TEST=1 too, with fewer
// tables to keep it short.

// demoResult is the line democheck prints when every region is open once.
const demoResult = "RESULT: every region is OPEN on exactly one region server"

func TestComposeFailoverDemo(t *testing.T) {
	composeFailoverDemo(t, "", nil)
}

func TestComposeStatefulSetDemo(t *testing.T) {
	out := composeFailoverDemo(t, "statefulset", []string{"DEMO_TABLES=3"})
	if out == "" {
		return
	}
	if m := regexp.MustCompile(`SCALE-UP: baton-master-3 joined and is a voter (\d+) ms after its start \(seen: ([^)]*)\)`).FindStringSubmatch(out); m == nil {
		t.Errorf("the demo passed without printing the scale-up's line (SCALE-UP: baton-master-3 joined and is a voter ...)")
	} else {
		t.Logf("scale-up: baton-master-3 a voter %s ms after its start (seen: %s)", m[1], m[2])
	}
}

// composeFailoverDemo runs scripts/demo-failover.sh on the default
// services (profile "") or on a profile's, in a compose project of its
// own, and checks what it must show; it returns the demo's output if it
// passed, "" if not (the test has failed or skipped).
func composeFailoverDemo(t *testing.T, profile string, env []string) string {
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
	project := demoProject()
	if profile != "" {
		project += "-" + profile
		env = append(env, "DEMO_COMPOSE_PROFILE="+profile, "DEMO_PROJECT="+project)
	}
	if os.Getenv("DEMO_KEEP") == "1" {
		t.Fatal("DEMO_KEEP=1 is set: the test checks that the demo removes what it made")
	}
	if leftovers := composeLeftovers(t, project); leftovers != "" {
		t.Fatalf("compose project %s exists before the demo (another run? 'scripts/demo-failover.sh' cleans it up, or docker compose -p %s down -v):\n%s", project, project, leftovers)
	}
	demoOut, ok := runDemo(t, "demo-failover.sh", 12*time.Minute, env)
	if !ok {
		// The script tears its cluster down on exit; in case it was
		// killed before it could, do it here.
		composeDown(t, project, profile)
		return ""
	}
	// The bound: a new leader within 1.5 s of the kill.
	checkDemoProof(t, demoOut, 1500*time.Millisecond)
	if leftovers := composeLeftovers(t, project); leftovers != "" {
		t.Errorf("the demo left behind:\n%s", leftovers)
		composeDown(t, project, profile)
	}
	return demoOut
}

func demoProject() string {
	if p := os.Getenv("DEMO_PROJECT"); p != "" {
		return p
	}
	return "baton-demo"
}

// composeLeftovers lists what is left of the compose project: containers,
// networks and volumes by the project's label, and its image
// (DEMO_IMAGE, else PROJECT:dev).
func composeLeftovers(t *testing.T, project string) string {
	t.Helper()
	image := os.Getenv("DEMO_IMAGE")
	if image == "" {
		image = project + ":dev"
	}
	label := "label=com.docker.compose.project=" + project
	var b strings.Builder
	for _, q := range []struct {
		what string
		args []string
	}{
		{"containers", []string{"ps", "-a", "--filter", label, "--format", "{{.Names}} {{.Status}}"}},
		{"networks", []string{"network", "ls", "--filter", label, "--format", "{{.Name}}"}},
		{"volumes", []string{"volume", "ls", "--filter", label, "--format", "{{.Name}}"}},
		{"images", []string{"images", image, "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, "docker", q.args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(q.args, " "), err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			fmt.Fprintf(&b, "%s: %s\n", q.what, strings.ReplaceAll(s, "\n", ", "))
		}
	}
	return b.String()
}

var (
	demoProofRe  = regexp.MustCompile(`PROOF: procedure (\d+) \((\S+), SUCCESS\) has writes by (\S+), the killed leader, and by (\S+), the new leader: (.+)`)
	demoTimingRe = regexp.MustCompile(`TIMING: new leader (\S+) elected (\d+) ms after the kill; first new procedure done (\d+) ms after the kill`)
)

// checkDemoProof holds a passing demo's output to what it must show: the
// proof, a procedure whose runs name the killed leader and then the new
// one, its timeline, and the failover's timing, the new leader within
// maxElection of the kill.
func checkDemoProof(t *testing.T, out string, maxElection time.Duration) {
	t.Helper()
	m := demoProofRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo passed without printing its proof (a line matching %s)", demoProofRe)
	}
	id, killed, newLeader, runs := m[1], m[3], m[4], m[5]
	if killed == newLeader {
		t.Fatalf("proof %q: the killed leader and the new one are both %s", m[0], killed)
	}
	if ik, in := strings.Index(runs, killed+" write"), strings.Index(runs, newLeader+" write"); ik < 0 || in < ik {
		t.Fatalf("proof %q: the runs do not show writes by %s and then by %s", m[0], killed, newLeader)
	}
	if !strings.Contains(out, "$ baton proc get "+id+" --history") || !strings.Contains(out, "now on "+newLeader) {
		t.Fatalf("the demo did not print procedure %s's timeline showing the move to %s", id, newLeader)
	}
	tm := demoTimingRe.FindStringSubmatch(out)
	if tm == nil {
		t.Fatalf("the demo passed without printing the failover's timing (a line matching %s)", demoTimingRe)
	}
	if tm[1] != newLeader {
		t.Fatalf("timing names %s as the new leader, the proof %s", tm[1], newLeader)
	}
	elected, _ := strconv.Atoi(tm[2])
	first, _ := strconv.Atoi(tm[3])
	if d := time.Duration(elected) * time.Millisecond; d > maxElection {
		t.Errorf("the new leader was elected %v after the kill, want at most %v", d, maxElection)
	}
	if first < elected {
		t.Errorf("the first new procedure was done %d ms after the kill, before the new leader was elected (%d ms)", first, elected)
	}
	t.Logf("proof: procedure %s (%s) ran on %s; new leader %s elected %d ms after the kill, first new procedure done %d ms after", id, m[2], runs, newLeader, elected, first)
}

// composeDown removes the demo's compose project, containers, volumes and
// image; a profile's services (and its scale-up's) are named with it.
func composeDown(t *testing.T, project, profile string) {
	args := []string{"-p", project, "--project-directory", "..", "-f", filepath.Join("..", "docker-compose.yml")}
	if profile != "" {
		args = append(args, "--profile", profile, "--profile", profile+"-scaleup")
	}
	args = append(args, "down", "-v", "--remove-orphans")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose"}, args...)...)
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() != nil {
		cmd = exec.CommandContext(ctx, "docker-compose", args...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("compose down: %v: %s", err, out)
	}
	image := os.Getenv("DEMO_IMAGE")
	if image == "" {
		image = project + ":dev"
	}
	if out, err := exec.CommandContext(ctx, "docker", "rmi", image).CombinedOutput(); err != nil {
		t.Logf("docker rmi %s: %v: %s", image, err, out)
	}
}

func TestDemoLocal(t *testing.T) {
	if os.Getenv("BATON_DEMO_LOCAL_TEST") != "1" {
		t.Skip("skipped: the local-process failover demo runs only with BATON_DEMO_LOCAL_TEST=1 (it uses ports 19010-19132, DEMO_PORT_BASE moves them)")
	}
	if os.Getenv("DEMO_KEEP") == "1" {
		t.Fatal("DEMO_KEEP=1 is set: the test checks that the demo stops what it started")
	}
	// The binary TestMain built (or BATON_NODE_BIN): no second build. It
	// may be race-built, on a loaded machine: a looser bound on the
	// election than the demo's 1.5 s, but one.
	const maxElection = 3 * time.Second
	out, ok := runDemo(t, "demo-local.sh", 5*time.Minute, []string{"BATON_NODE_BIN=" + nodeBin,
		fmt.Sprintf("DEMO_MAX_FAILOVER_MS=%d", maxElection.Milliseconds())})
	if !ok {
		return
	}
	checkDemoProof(t, out, maxElection)
	// Nothing left: every process it started has exited, its directory
	// is gone.
	started := regexp.MustCompile(`(?m)^    (n\d|rs\d)\s+pid (\d+) .* log (\S+)/logs/`).FindAllStringSubmatch(out, -1)
	if len(started) < 6 {
		t.Fatalf("the demo's output names %d started processes, want the 3 masters and 3 region servers", len(started))
	}
	for _, m := range started {
		pid, _ := strconv.Atoi(m[2])
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) is still running after the demo", m[1], pid)
		}
		if _, err := os.Stat(m[3]); !os.IsNotExist(err) {
			t.Errorf("the demo's directory %s is still there (%v)", m[3], err)
		}
	}
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
// streaming its output to the test log, and returns the output and whether
// it exited 0 having printed demoResult (else the test has failed). At the deadline
// (limit, or the test's own deadline if sooner) the script gets SIGTERM, on
// which it tears its cluster down; it is killed if it has not exited a
// minute later. The script runs in its own process group, and whatever is
// left of the group when it has exited is killed.
func runDemo(t *testing.T, script string, limit time.Duration, env []string) (string, bool) {
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
		return all.String(), true
	}
	return all.String(), false
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
