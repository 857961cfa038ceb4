package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// Sampler reads, over and over during a run, which regions every region
// server says it hosts (its own ListRegions answer), and records every
// region it finds open on two servers at one moment.
//
// A sample reads every server twice, in two passes; the second starts
// only after every call of the first has returned. A region a server lists
// in both passes, under the same start code and with the same opening
// time, was open there during the whole span between its two reads, and
// every such span contains the moment between the passes: two servers
// listing one region that way held it at the same moment. A region that
// moved (closed on one, then opened on the other) is never mistaken for a
// double, however slow the calls. A server that does not answer a pass
// (killed, paused, cut off) is left out of the sample.
type Sampler struct {
	c       *harness.Cluster
	timeout time.Duration // per call

	mu      sync.Mutex
	samples int
	doubles int
	reports []string
	seen    map[string]bool // regions found doubled
}

// NewSampler returns a sampler of c's region servers; each ListRegions
// call is bounded by callTimeout.
func NewSampler(c *harness.Cluster, callTimeout time.Duration) *Sampler {
	return &Sampler{c: c, timeout: callTimeout, seen: map[string]bool{}}
}

// Run samples until ctx ends, starting a new sample every at most every
// (sooner if a sample took longer).
func (s *Sampler) Run(ctx context.Context, every time.Duration) {
	for ctx.Err() == nil {
		start := time.Now()
		s.Sample(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(every - time.Since(start)):
		}
	}
}

type answer struct {
	startCode uint64
	opened    map[string]int64 // region -> opened_unix_ms
}

func (s *Sampler) pass(ctx context.Context, ids []string) map[string]answer {
	var mu sync.Mutex
	out := map[string]answer{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			r, err := s.c.RSRegions(cctx, id)
			if err != nil || r.GetStartCode() == 0 {
				return // unreachable, or not registered: hosts nothing
			}
			a := answer{startCode: r.GetStartCode(), opened: map[string]int64{}}
			for _, h := range r.GetRegions() {
				a.opened[h.GetRegion()] = h.GetOpenedUnixMs()
			}
			mu.Lock()
			out[id] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Sample takes one two-pass sample.
func (s *Sampler) Sample(ctx context.Context) {
	ids := s.c.RegionServerIDs()
	first := s.pass(ctx, ids)
	second := s.pass(ctx, ids)
	if ctx.Err() != nil {
		return // calls cut short by the end of the run: not a sample
	}
	at := time.Now()
	held := map[string][]string{}
	for id, a2 := range second {
		a1, ok := first[id]
		if !ok || a1.startCode != a2.startCode {
			continue
		}
		for region, opened := range a2.opened {
			if o, ok := a1.opened[region]; ok && o == opened {
				held[region] = append(held[region], id)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for region, servers := range held {
		if len(servers) < 2 {
			continue
		}
		sort.Strings(servers)
		s.doubles++
		if !s.seen[region] && len(s.reports) < 10 {
			var where []string
			for _, id := range servers {
				where = append(where, fmt.Sprintf("%s/%d (opened %s)", id, second[id].startCode,
					time.UnixMilli(second[id].opened[region]).Format("15:04:05.000")))
			}
			s.reports = append(s.reports, fmt.Sprintf("%s: region %s open on %s", at.Format("15:04:05.000"), region, strings.Join(where, " and ")))
		}
		s.seen[region] = true
	}
}

// Result returns how many samples were taken, how many (region, sample)
// doubles were found, and the first few described.
func (s *Sampler) Result() (samples, doubles int, reports []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.doubles, append([]string(nil), s.reports...)
}

// nonTerminal are the procedure states of a procedure that has not
// finished (FAILED: it is rolling back).
var nonTerminal = []string{client.StateInitializing, client.StateRunnable, client.StateWaiting, client.StateWaitingTimeout, client.StateFailed}

// Unfinished lists the procedures not terminal now, by the leader's
// answer.
func Unfinished(ctx context.Context, cl *client.Client) ([]string, error) {
	var out []string
	for _, st := range nonTerminal {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ps, err := cl.ListAll(cctx, client.ListOptions{State: st})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list %s procedures: %w", st, err)
		}
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%d %s %s", p.GetId(), p.GetType(), p.GetState()))
		}
	}
	return out, nil
}

// EndState checks the settled placement once: every region of every
// ENABLED table open on exactly one region server, by the servers' own
// answers; none of a DISABLED table, of a table in deleted ("ns:name"), or
// of no known table open anywhere. problems lists what does not hold yet
// (a table still changing state is a problem: the caller retries until
// things settle or its deadline passes); doubles are regions open on two
// servers.
func EndState(ctx context.Context, c *harness.Cluster, cl *client.Client, deleted map[string]bool) (problems, doubles []string, err error) {
	hosted := map[string][]string{} // region -> servers
	for _, id := range c.RegionServerIDs() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := c.RSRegions(cctx, id)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", id, err)
		}
		for _, h := range r.GetRegions() {
			hosted[h.GetRegion()] = append(hosted[h.GetRegion()], id)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	tables, err := cl.ListTables(cctx, "")
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("list tables: %w", err)
	}
	known := map[string]bool{}
	for _, t := range tables {
		name := t.GetNamespace() + ":" + t.GetName()
		if deleted[name] {
			problems = append(problems, fmt.Sprintf("table %s was deleted but is listed (%s)", name, t.GetState()))
		}
		// A listed table carries counts only: its regions are listed apart.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		regions, err := cl.ListRegions(rctx, name)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("list regions of %s: %w", name, err)
		}
		for _, r := range regions {
			known[r.GetName()] = true
			on := hosted[r.GetName()]
			switch t.GetState() {
			case "ENABLED":
				if len(on) != 1 {
					problems = append(problems, fmt.Sprintf("region %s of enabled table %s open on %d servers %v", r.GetName(), name, len(on), on))
				}
			case "DISABLED":
				if len(on) != 0 {
					problems = append(problems, fmt.Sprintf("region %s of disabled table %s open on %v", r.GetName(), name, on))
				}
			default:
				problems = append(problems, fmt.Sprintf("table %s still %s", name, t.GetState()))
			}
		}
	}
	for region, on := range hosted {
		if len(on) > 1 {
			doubles = append(doubles, fmt.Sprintf("region %s open on %v", region, on))
		}
		if !known[region] {
			problems = append(problems, fmt.Sprintf("region %s of no listed table (deleted?) open on %v", region, on))
		}
	}
	sort.Strings(problems)
	sort.Strings(doubles)
	return problems, doubles, nil
}
