package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/freeport"
)

// childEnv makes the test binary, started by a test of this package, a
// child that prints a line and then either blocks or exits with the code
// given.
const childEnv = "BATON_PROCESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		fmt.Println("child says", v)
		if v == "block" {
			select {}
		}
		var code int
		fmt.Sscan(v, &code)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func child(log, mode string) Spec {
	return Spec{Name: "child", Bin: os.Args[0], Args: []string{"-test.run=^$"}, Env: append(os.Environ(), childEnv+"="+mode),
		LogPath: log, Banner: "test"}
}

// waitDone waits for the current process to exit, with a deadline.
func waitDone(t *testing.T, p *Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("the child did not exit")
	}
}

// TestKillIsNotACrash: a process the caller kills is not reported as
// crashed, one that exits on its own is, with its exit code, and the log
// read after a restart holds that start's output only.
func TestKillIsNotACrash(t *testing.T) {
	var p Process
	if err := p.Kill(); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Kill before Start: %v, want ErrNotStarted", err)
	}
	log := filepath.Join(t.TempDir(), "child.log")
	if err := p.Start(child(log, "block")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if !p.Running() || p.Pid() == 0 {
		t.Fatalf("after Start: running %v, pid %d", p.Running(), p.Pid())
	}
	if err := p.Start(child(log, "block")); err == nil {
		t.Fatal("a second Start while running: no error")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() || p.Crashed() || p.ExitCode() != -1 {
		t.Fatalf("after Kill: running %v, crashed %v, exit code %d; want false, false, -1", p.Running(), p.Crashed(), p.ExitCode())
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill of an exited process: %v", err)
	}

	if err := p.Start(child(log, "3")); err != nil {
		t.Fatal(err)
	}
	waitDone(t, &p)
	if !p.Crashed() || p.ExitCode() != 3 {
		t.Fatalf("after exiting on its own: crashed %v, exit code %d; want true, 3", p.Crashed(), p.ExitCode())
	}
	got := p.LogSinceStart()
	if !strings.HasPrefix(got, "=== test: start #2 of child at ") || !strings.Contains(got, "child says 3") || strings.Contains(got, "block") {
		t.Errorf("log since the second start %q: want its banner and its output only", got)
	}
}

func TestFreeAddrs(t *testing.T) {
	addrs, err := FreeAddrs(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
			t.Errorf("addresses %v: want 5 distinct loopback ones", addrs)
		}
		seen[a] = true
		// Below the kernel's ephemeral range, where no connection of
		// another process is given the port before the child binds it;
		// and bindable once let go.
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if low := freeport.EphemeralLow(); freeport.Drawn(low) && (port < freeport.Floor || port >= low) {
			t.Errorf("FreeAddrs gave port %d, want one in [%d, %d)", port, freeport.Floor, low)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("binding FreeAddrs' %s: %v", a, err)
		}
		l.Close()
	}
}
