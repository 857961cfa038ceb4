package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// AuditResult is what Audit found: for each convergence condition, how
// long after the audit's start it held for good, or what was still unmet
// at its bound; and regions found open on two servers in two reads in a
// row.
type AuditResult struct {
	Took    map[string]time.Duration
	Unmet   map[string][]string
	Doubles []string
}

// Err is nil when every condition held and no region was open twice.
func (r AuditResult) Err() error {
	var errs []error
	if len(r.Doubles) > 0 {
		errs = append(errs, fmt.Errorf("SAFETY VIOLATION: %s", strings.Join(r.Doubles, "; ")))
	}
	for _, cond := range convergenceConds {
		if _, met := r.Took[cond]; !met {
			errs = append(errs, fmt.Errorf("%s: not met:\n    %s", cond, strings.Join(firstN(r.Unmet[cond], 20), "\n    ")))
		}
	}
	return errors.Join(errs...)
}

// Summary renders when each condition held, for a test's log.
func (r AuditResult) Summary() string {
	var parts []string
	for _, cond := range convergenceConds {
		if d, met := r.Took[cond]; met {
			parts = append(parts, fmt.Sprintf("%s: %v", cond, d.Round(10*time.Millisecond)))
		} else {
			parts = append(parts, fmt.Sprintf("%s: NOT MET", cond))
		}
	}
	return strings.Join(parts, "; ")
}

// Audit is the chaos suite's end-state audit for a run outside it (the
// disaster drills in package integration): round after round, for at
// most within, the liveness phase's checks on c through cl: every region
// server live; every procedure in acked (id -> what it did) terminal; every
// region of every enabled table open on exactly one live server and none
// of a disabled, deleted (deleted: "ns:name") or unknown table open; no
// procedure waiting on a live server; none unfinished. The workload is
// over when it is called.
func Audit(ctx context.Context, c *harness.Cluster, cl *client.Client, acked map[uint64]string, deleted map[string]bool, within time.Duration) AuditResult {
	ak := newAcked()
	for id, what := range acked {
		ak.add(id, what)
	}
	workers := make(chan struct{})
	close(workers)
	k := &checks{c: c, cl: cl, acked: ak, deleted: func() map[string]bool { return deleted }, workers: workers}
	cv := converge(ctx, k.round, time.Now(), within)
	return AuditResult{Took: cv.took, Unmet: cv.unmet, Doubles: cv.doubles}
}

// LivenessBound is how long after the last fault every condition of the
// audit must hold (see livenessTerms): a drill's bound for Audit.
func LivenessBound() time.Duration { return livenessBound }

// firstN is s cut to its first n, saying how many more there were.
func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}
