package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/version"
)

// The overview shows the cluster version and each master's binary: a
// member that has not reported (as 0.1.0 never does) as format 1.
func TestOverviewShowsVersions(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 3, HTTP: true, NoDomain: true, Node: func(i int, cfg *cluster.Config) {
		if i == 2 {
			cfg.Build = version.Build{Version: "0.1.9-standin", MaxFormat: version.Format1}
		}
	}})
	li, _ := c.WaitLeader()
	m := c.Master(li)
	c.WaitForNil("versions on the overview", func() error {
		code, body := get(t, m, "/")
		if code != http.StatusOK {
			return fmt.Errorf("status %d", code)
		}
		for _, want := range []string{`<span id="cluster-format">format 1</span>`, version.Dev + " (format 2)", "0.1.9-standin (format 1)"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("overview lacks %q", want)
			}
		}
		return nil
	})
}
