package clustertest_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
)

// Close leaves no goroutine behind: a harness that leaks would make every
// test that uses it leak.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	c := clustertest.New(t, clustertest.Config{RegionServers: 2})
	c.Client()
	c.Partition(0)
	c.Pause(1, time.Hour)
	c.Close()
	if !testwait.Until(20*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		var ours []string
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if !strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "testing.(*T).Run") {
				ours = append(ours, g)
			}
		}
		t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, strings.Join(ours, "\n\n"))
	}
}
