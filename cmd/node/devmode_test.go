package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
)

// devArgs is an `agent --dev` command line on free ports and a fresh data
// directory, with extra flags; admin is its admin address.
func devArgs(t *testing.T, extra ...string) (args []string, admin string) {
	admin = testnet.FreeAddr(t)
	args = append([]string{"agent", "--dev", "--data-dir", t.TempDir(),
		"--grpc-addr", admin, "--raft-addr", testnet.FreeAddr(t), "--http-addr", testnet.FreeAddr(t)}, extra...)
	return args, admin
}

// startDevAgent runs `agent --dev` in-process (see devArgs) until the test
// ends or stop is called, which fails the test unless the agent exits 0;
// it returns once the banner is out.
func startDevAgent(t *testing.T, extra ...string) (admin string, banner string, stop func()) {
	args, admin := devArgs(t, extra...)
	out, _, cancel, done := runInBackground(map[string]string{}, args...)
	var once sync.Once
	code := -1
	halt := func() int {
		once.Do(func() { cancel(); code = exitOf(t, done) })
		return code
	}
	t.Cleanup(func() { halt() })
	stop = func() {
		t.Helper()
		if code := halt(); code != 0 {
			t.Fatalf("agent exit %d", code)
		}
	}
	testwait.For(t, 30*time.Second, "the dev agent's banner", func() bool { return strings.Contains(out.String(), "try:") })
	return admin, out.String(), stop
}

// TestDevAgentRunsRegionServers: `agent --dev` runs three region servers of
// its own, says so, and a table can be created against it at once.
func TestDevAgentRunsRegionServers(t *testing.T) {
	admin, banner, stop := startDevAgent(t)
	for _, want := range []string{"region servers:   3 in this process", "rs1 at 127.0.0.1:", "rs2 at 127.0.0.1:", "rs3 at 127.0.0.1:", "baton table create t1"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	code, stdout, stderr := runCLI(t, nil, "table", "create", "t1", "--regions", "4", "--wait", "--timeout", "60s", "--addr", admin, "--json")
	if code != 0 {
		t.Fatalf("table create: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var doc struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.State != "SUCCESS" {
		t.Fatalf("table create --json: %v\n%s", err, stdout)
	}
	testwait.ForNil(t, 30*time.Second, "3 live region servers", func() error {
		code, stdout, stderr := runCLI(t, nil, "rs", "list", "--addr", admin, "--json")
		if code != 0 || strings.Count(stdout, `"live"`) != 3 {
			return fmt.Errorf("rs list: exit %d\n%s\n%s", code, stdout, stderr)
		}
		return nil
	})
	stop()
}

func TestDevRegionServersFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--dev", "--dev-regionservers", "-1"}, "--dev-regionservers \"-1\": want a number"},
		{[]string{"agent", "--dev", "--dev-regionservers", "x"}, "want a number"},
		{[]string{"agent", "--id", "n1", "--data-dir", "d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--dev-regionservers", "2"}, "--dev-regionservers is for --dev only"},
	} {
		code, _, stderr := runCLI(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q in\n%s", tc.args, code, exitUsage, tc.want, stderr)
		}
	}
	code, stdout, stderr := runCLI(t, nil, "agent", "-h")
	if help := stdout + stderr; code != 0 || !strings.Contains(help, "-dev-regionservers") || !strings.Contains(help, "simulated region servers") {
		t.Errorf("agent -h: exit %d\n%s", code, help)
	}
}

// TestWaitSaysWhyAndIsBounded runs the binary as a user would: a dev agent
// without region servers, a table create that cannot progress. The wait
// says why on stderr, Ctrl-C ends it with 130 and says how to wait again,
// and --timeout bounds the wait again (exit 3, naming what it waited for).
func TestWaitSaysWhyAndIsBounded(t *testing.T) {
	bin := buildBaton(t)
	args, admin := devArgs(t, "--dev-regionservers", "0")
	agent := exec.Command(bin, args...)
	var aout, aerr syncbuf.Buffer
	agent.Stdout, agent.Stderr = &aout, &aerr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	testwait.For(t, 30*time.Second, "the dev agent's banner", func() bool { return strings.Contains(aout.String(), "try:") })
	if !strings.Contains(aout.String(), "region servers:   none") {
		t.Errorf("banner does not say there are no region servers:\n%s", aout.String())
	}

	create := exec.Command(bin, "table", "create", "t1", "--wait", "--addr", admin)
	var cout, cerr syncbuf.Buffer
	create.Stdout, create.Stderr = &cout, &cerr
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = create.Process.Kill() })
	testwait.For(t, 30*time.Second, "the wait to say why", func() bool { return strings.Contains(cerr.String(), "no live region server; waiting") })
	if err := create.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := create.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("after Ctrl-C: %v, want exit 130\nstdout:\n%s\nstderr:\n%s", err, cout.String(), cerr.String())
	}
	m := regexp.MustCompile(`procedure (\d+) goes on in the cluster; 'baton proc wait (\d+)' waits for it again`).FindStringSubmatch(cerr.String())
	if m == nil || m[1] != m[2] {
		t.Fatalf("after Ctrl-C, stderr does not say how to wait again:\n%s", cerr.String())
	}
	id := m[1]

	wait := exec.Command(bin, "proc", "wait", id, "--timeout", "4s", "--addr", admin)
	var werr bytes.Buffer
	wait.Stderr = &werr
	err = wait.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUnavailable {
		t.Fatalf("proc wait --timeout 4s: %v, want exit 3\n%s", err, werr.String())
	}
	want := "timed out after 4s waiting for procedure " + id + " (waiting for children: procedure "
	if !strings.Contains(werr.String(), want) || !strings.Contains(werr.String(), ": no live region server; waiting)") {
		t.Fatalf("proc wait --timeout: stderr lacks %q...no live region server:\n%s", want, werr.String())
	}

	// --json: one document naming the same, and nothing of the progress.
	wait = exec.Command(bin, "proc", "wait", id, "--timeout", "4s", "--addr", admin, "--json")
	out, err := wait.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUnavailable {
		t.Fatalf("proc wait --json: %v, want exit 3", err)
	}
	var doc struct {
		Error struct {
			Code     string `json:"code"`
			Message  string `json:"message"`
			ExitCode int    `json:"exit_code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if doc.Error.Code != "DEADLINE_EXCEEDED" || doc.Error.ExitCode != 3 || !strings.Contains(doc.Error.Message, "no live region server") {
		t.Fatalf("--json: %+v", doc)
	}

	if err := agent.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	if err := within(t, done, 30*time.Second, "the agent did not stop on SIGINT"); err != nil {
		t.Fatalf("agent: %v\n%s", err, aerr.String())
	}
}

// TestWaitInterrupted: an interrupted --wait (in-process) exits 130 and
// --json prints one error document.
func TestWaitInterrupted(t *testing.T) {
	admin, _, _ := startDevAgent(t, "--dev-regionservers", "0")
	watching := make(chan uint64, 1)
	out, errb, interrupt, done := runInBackgroundWatching(nil, func(id uint64) { watching <- id },
		"proc", "submit", "sleep", "--arg", "steps=1", "--arg", "delay=1h", "--wait", "--json", "--addr", admin)
	// The command must be waiting (its submission answered) before the
	// interrupt: the cluster listing the procedure is not enough on a
	// loaded machine, where the answer may still be on its way.
	select {
	case <-watching:
	case code := <-done:
		t.Fatalf("the command ended (exit %d) before waiting\n%s\n%s", code, out.String(), errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start waiting")
	}
	testwait.For(t, 30*time.Second, "the submission", func() bool {
		code, stdout, _ := runCLI(t, nil, "proc", "list", "--addr", admin, "--json")
		return code == 0 && strings.Contains(stdout, `"WAITING_TIMEOUT"`)
	})
	interrupt()
	if code := exitOf(t, done); code != exitInterrupted {
		t.Fatalf("exit %d, want 130\n%s\n%s", code, out.String(), errb.String())
	}
	var doc struct {
		ID    uint64         `json:"id"`
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || doc.ID == 0 || doc.Error["exit_code"] != 130.0 || doc.Error["code"] != "CANCELLED" {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if !strings.Contains(errb.String(), "'baton proc wait ") || strings.Contains(out.String(), "waiting for timer") {
		t.Fatalf("stderr:\n%s\nstdout:\n%s", errb.String(), out.String())
	}
}

// TestAgentSubmitRateLimit: an agent with --submit-rate refuses the calls
// that start procedures beyond a caller's burst (RESOURCE_EXHAUSTED: exit
// 1, saying when the next is allowed), while reads go on; the one a caller
// may make again later succeeds.
func TestAgentSubmitRateLimit(t *testing.T) {
	admin, _, _ := startDevAgent(t, "--submit-rate", "0.5", "--submit-burst", "2")
	submit := func() (int, string) {
		code, stdout, stderr := runCLI(t, nil, "proc", "submit", "sleep", "--arg", "steps=1", "--arg", "delay=0s", "--addr", admin)
		return code, stdout + stderr
	}
	for i := range 2 {
		if code, out := submit(); code != exitOK {
			t.Fatalf("submission %d within the burst: exit %d\n%s", i, code, out)
		}
	}
	code, out := submit()
	if code != exitFailed || !strings.Contains(out, "submit rate limit") || !strings.Contains(out, "next is allowed in") {
		t.Fatalf("third submission: exit %d, want 1 naming the limit\n%s", code, out)
	}
	if code, _, stderr := runCLI(t, nil, "proc", "list", "--addr", admin); code != exitOK {
		t.Fatalf("a read while limited: exit %d\n%s", code, stderr)
	}
	testwait.For(t, 30*time.Second, "a token earned back (0.5/s)", func() bool {
		code, _ := submit()
		return code == exitOK
	})
}
