package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/proto/adminpb"
)

// boundTerm is one part of livenessBound: what may still take time once
// every fault is healed, and how long at most, by the system's own
// timeouts (the agents run with their defaults: the harness sets none).
type boundTerm struct {
	what string
	d    time.Duration
}

// livenessTerms derive livenessBound. Healing leaves, at worst: masters
// that must agree on a leader again; region server incarnations that
// vanished (killed, fenced by a cut or a long pause) whose leases the
// leader must expire before it reassigns their regions (a new leader
// grants every known server a fresh grace of the hard limit: renewals are
// not replicated), and whose regions it must then believe closed (the
// self-fence period and its margin); region procedures that sent an op
// the fault swallowed, which wait out the dispatch timeout before they
// look again, then perhaps one retry backoff, for the close and for the
// open of a move; a dispatcher whose batch failed against a server that
// was down, retrying at its longest period. On top, slack for a loaded
// two-core machine: restarted processes replay their logs, and the
// convergence checks poll.
func livenessTerms() []boundTerm {
	l := lease.DefaultConfig()
	heartbeatInterval := l.SoftLimit / 3 // domain.Config.HeartbeatInterval's default
	return []boundTerm{
		{"leader election: 5 rounds of 2×heartbeat timeout + election timeout", 5 * (2*cluster.DefaultHeartbeatTimeout + cluster.DefaultElectionTimeout)},
		{"region server lease: hard limit + monitor interval", l.HardLimit + l.MonitorInterval},
		{"fenced incarnation gone: 3×heartbeat interval + fence margin", 3*heartbeatInterval + domain.DefaultFenceMargin},
		{"lost region ops: 2×(dispatch timeout + region retry backoff max)", 2 * (domain.DefaultDispatchTimeout + domain.DefaultRetryBackoff.Max)},
		{"dispatcher retry max", dispatch.DefaultRetryMax},
		{"slack for a loaded 2-core machine", 30 * time.Second},
	}
}

// livenessBound is how long after the last fault is healed every
// convergence condition must hold: the sum of livenessTerms (about 107 s).
var livenessBound = func() time.Duration {
	var d time.Duration
	for _, t := range livenessTerms() {
		d += t.d
	}
	return d
}()

// livenessDerivation renders livenessTerms for the summary.
func livenessDerivation() string {
	var parts []string
	for _, t := range livenessTerms() {
		parts = append(parts, fmt.Sprintf("%v %s", t.d, t.what))
	}
	return strings.Join(parts, " + ")
}

// acked tracks the procedures the cluster acknowledged to the workers
// (it returned their ids) and those the workers saw end: the rest must be
// terminal once the cluster converged.
type acked struct {
	mu       sync.Mutex
	ids      map[uint64]string // id -> what it does
	finished map[uint64]bool
}

func newAcked() *acked { return &acked{ids: map[uint64]string{}, finished: map[uint64]bool{}} }

func (a *acked) add(id uint64, what string) {
	a.mu.Lock()
	a.ids[id] = what
	a.mu.Unlock()
}

func (a *acked) done(id uint64) {
	a.mu.Lock()
	a.finished[id] = true
	a.mu.Unlock()
}

// pending returns the acknowledged ids not known to be terminal, in order.
func (a *acked) pending() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []uint64
	for id := range a.ids {
		if !a.finished[id] {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (a *acked) count() int {
	return locked.Call(&a.mu, func() int { return len(a.ids) })
}

func (a *acked) what(id uint64) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

// Convergence conditions, in the summary's order.
const (
	condServers  = "every region server live"
	condAcked    = "acknowledged procedures finished"
	condRegions  = "enabled regions open once, on a live server"
	condWaitLive = "no procedure waiting on a live server"
	condNoneOpen = "no procedure unfinished"
)

var convergenceConds = []string{condServers, condAcked, condRegions, condWaitLive, condNoneOpen}

// convergence is what the liveness phase found: for each condition, how
// long after healing it held for good (from the first check after the
// last one that found it unmet), or what was still unmet at the bound.
type convergence struct {
	took    map[string]time.Duration
	unmet   map[string][]string
	doubles []string // regions open on two servers in two reads in a row
	acked   int      // procedures acknowledged to the workers
}

// checks are the reads one round of the liveness phase makes; the
// round's verdict on each condition is what they return.
type checks struct {
	c       *harness.Cluster
	cl      *client.Client
	acked   *acked
	deleted func() map[string]bool
	workers <-chan struct{} // closed once every worker has stopped
}

// round checks every condition once: the problems of each (none: it
// holds) and regions found open on two servers.
func (k *checks) round(ctx context.Context) (map[string][]string, []string) {
	out := map[string][]string{}
	live, err := liveServers(ctx, k.cl)
	if err != nil {
		for _, c := range convergenceConds {
			out[c] = []string{err.Error()}
		}
		return out, nil
	}
	for _, id := range k.c.RegionServerIDs() {
		if _, ok := live[id]; !ok {
			out[condServers] = append(out[condServers], id+" not live")
		}
	}

	select {
	case <-k.workers:
	default:
		out[condAcked] = append(out[condAcked], "workers still finishing their operations")
	}
	for _, id := range k.acked.pending() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		p, err := k.cl.Get(cctx, id)
		cancel()
		switch {
		case status.Code(err) == codes.NotFound:
			out[condAcked] = append(out[condAcked], fmt.Sprintf("%d (%s) unknown to the leader", id, k.acked.what(id)))
		case err != nil:
			out[condAcked] = append(out[condAcked], fmt.Sprintf("%d (%s): %v", id, k.acked.what(id), err))
		case client.Terminal(p.GetState()):
			k.acked.done(id)
		default:
			out[condAcked] = append(out[condAcked], fmt.Sprintf("%d (%s) %s: %s", id, k.acked.what(id), p.GetState(), p.GetWaitingFor()))
		}
	}

	problems, doubles, err := EndState(ctx, k.c, k.cl, k.deleted())
	if err != nil {
		problems = []string{err.Error()}
	}
	out[condRegions] = append(problems, doubles...)
	if err == nil {
		out[condRegions] = append(out[condRegions], onDeadServers(ctx, k.c, live)...)
	}

	var waiting []*adminpb.Procedure
	for _, st := range []string{client.StateWaiting, client.StateWaitingTimeout} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ps, err := k.cl.ListAll(cctx, client.ListOptions{State: st})
		cancel()
		if err != nil {
			out[condWaitLive] = append(out[condWaitLive], err.Error())
			continue
		}
		for _, p := range ps {
			if !waitsOnOthers(p.GetWaitingFor()) {
				// The listing carries no data: read where it waits.
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				full, err := k.cl.Get(cctx, p.GetId())
				cancel()
				if err == nil {
					waiting = append(waiting, full)
				}
			}
		}
	}
	out[condWaitLive] = append(out[condWaitLive], waitsOnLive(waiting, live)...)

	u, err := Unfinished(ctx, k.cl)
	if err != nil {
		u = []string{err.Error()}
	}
	out[condNoneOpen] = u
	return out, doubles
}

// liveServers returns the incarnations the leader holds live, by id.
func liveServers(ctx context.Context, cl *client.Client) (map[string]uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	srvs, err := cl.ListServers(cctx)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	live := map[string]uint64{}
	for _, s := range srvs {
		if s.GetLeaseState() == client.LeaseLive {
			live[s.GetId()] = s.GetStartCode()
		}
	}
	return live, nil
}

// onDeadServers lists regions a region server hosts under an incarnation
// the leader does not hold live.
func onDeadServers(ctx context.Context, c *harness.Cluster, live map[string]uint64) []string {
	var out []string
	for _, id := range c.RegionServerIDs() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := c.RSRegions(cctx, id)
		cancel()
		if err != nil || len(r.GetRegions()) == 0 {
			continue // EndState reported an unreachable server
		}
		if sc, ok := live[id]; !ok || sc != r.GetStartCode() {
			out = append(out, fmt.Sprintf("%s/%d hosts %d regions but the leader holds it not live", id, r.GetStartCode(), len(r.GetRegions())))
		}
	}
	return out
}

// waitsOnOthers tells the waits on another procedure (a lock, children)
// or on nothing (paused, queued) from those on the outside world: by the
// admin API's waiting_for, which renders procedure.Why's reason.
func waitsOnOthers(why string) bool {
	for _, p := range []string{"waiting for lock", "waiting for children", "paused", "queued", "running", "finished"} {
		if strings.HasPrefix(why, p) {
			return true
		}
	}
	return false
}

// waitsOnLive lists the procedures among ps that are parked (WAITING or
// WAITING_TIMEOUT, not on another procedure) on a region server
// incarnation the leader holds live: its persisted state names the server
// its current open or close went to. A live server answers an op within
// the dispatch timeout; such a wait outlasting the convergence bound is
// a lost op.
func waitsOnLive(ps []*adminpb.Procedure, live map[string]uint64) []string {
	var out []string
	for _, p := range ps {
		if st := p.GetState(); st != client.StateWaiting && st != client.StateWaitingTimeout {
			continue
		}
		if waitsOnOthers(p.GetWaitingFor()) {
			continue
		}
		var d struct {
			Server struct {
				ID        string `json:"id"`
				StartCode uint64 `json:"start_code"`
			} `json:"server"`
		}
		if json.Unmarshal(p.GetData(), &d) != nil || d.Server.ID == "" {
			continue
		}
		if sc, ok := live[d.Server.ID]; ok && sc == d.Server.StartCode {
			out = append(out, fmt.Sprintf("%d %s %s on %s/%d: %s", p.GetId(), p.GetType(), p.GetState(), d.Server.ID, d.Server.StartCode, p.GetWaitingFor()))
		}
	}
	return out
}

// converge checks every condition (round: checks.round), round after
// round, from healed until all hold in one round or bound has passed. A
// region open on two servers in two reads in a row ends it at once (a
// safety violation).
func converge(ctx context.Context, round func(context.Context) (map[string][]string, []string), healed time.Time, bound time.Duration) convergence {
	cv := convergence{took: map[string]time.Duration{}, unmet: map[string][]string{}}
	deadline := healed.Add(bound)
	lastUnmet := map[string]bool{}
	var prev map[string]bool
	for _, c := range convergenceConds {
		lastUnmet[c] = true
	}
	for {
		rctx, cancel := context.WithDeadline(ctx, deadline.Add(10*time.Second))
		out, d := round(rctx)
		cancel()
		at := time.Since(healed)
		seen := map[string]bool{}
		for _, x := range d {
			seen[x] = true
			if prev[x] {
				cv.doubles = append(cv.doubles, x)
			}
		}
		prev = seen
		all := true
		for _, c := range convergenceConds {
			if len(out[c]) > 0 {
				lastUnmet[c] = true
				all = false
				delete(cv.took, c)
				continue
			}
			if lastUnmet[c] {
				cv.took[c], lastUnmet[c] = at, false
			}
		}
		if all || len(cv.doubles) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			for _, c := range convergenceConds {
				if len(out[c]) > 0 {
					cv.unmet[c] = out[c]
				}
			}
			return cv
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
