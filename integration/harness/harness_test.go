package harness

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// spinEnv makes the test binary, started by a test of this package, a
// process whose threads never block: the hardest kind to stop.
const spinEnv = "BATON_HARNESS_TEST_SPIN"

func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) != "" {
		for range runtime.NumCPU() + 2 {
			go func() {
				for {
				}
			}()
		}
		select {}
	}
	os.Exit(m.Run())
}

// TestPauseStopsEveryThread: when pause returns, every thread of the
// process is stopped, not merely signalled: a node a test believes frozen
// must not answer anything any more.
func TestPauseStopsEveryThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("thread states are read from /proc")
	}
	for i := range 20 {
		var p proc
		if err := p.run("spinner", os.Args[0], []string{"-test.run=^$"}, []string{spinEnv + "=1"}, filepath.Join(t.TempDir(), "spinner.log")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.reap(t, "spinner") })
		if err := p.pause(); err != nil {
			t.Fatal(err)
		}
		states, err := groupThreadStates(p.p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		if states == "" || strings.Trim(states, "T") != "" {
			t.Fatalf("run %d: thread states %q right after pause, want every one stopped (T)", i, states)
		}
		if err := p.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := p.kill(); err != nil {
			t.Fatal(err)
		}
	}
}
