package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/baton-dev/baton/integration/harness"
)

// nodeBin is the baton binary every test runs, built once by TestMain (or
// given as BATON_NODE_BIN).
var nodeBin string

func TestMain(m *testing.M) {
	// An interrupted run (Ctrl-C, a CI job cancelled) runs no test
	// cleanup: take this binary's iptables chains away before dying. What
	// a SIGKILL or a test timeout leaves is swept by the next run.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		if err := DropOwnChains(); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		}
		fmt.Fprintf(os.Stderr, "chaos: %v: iptables chains removed; processes die with the test binary (Pdeathsig)\n", sig)
		os.Exit(2)
	}()
	code := run(m)
	if err := DropOwnChains(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	flag.Parse()
	if err := SweepChains(); err != nil && os.Geteuid() == 0 {
		fmt.Fprintf(os.Stderr, "chaos: sweep of leftover iptables chains: %v\n", err)
	}
	return harness.RunWithBinary(m, "baton-chaos-bin-", &nodeBin)
}

var clusterSeq atomic.Uint32

// uidBase returns a harness.Options.UIDBase of its own for each cluster of
// this run (0 when not root: the processes then run as the test does and
// partitions are left out). The pid keeps concurrent runs apart.
func uidBase() uint32 {
	if os.Geteuid() != 0 {
		return 0
	}
	return 200000 + uint32(os.Getpid()%20000)*1000 + (clusterSeq.Add(1)%4)*250
}
