package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// Fault kinds, as the summary names them.
const (
	FaultLeaderKill = "leader SIGKILL+restart"
	FaultPause      = "leader SIGSTOP/SIGCONT"
	FaultIsolate    = "leader Raft isolated"
	FaultSplit      = "masters split 1|2"
	FaultRSCut      = "region server cut > lease"
	FaultRSKill     = "region server SIGKILL+restart"
	FaultRSPause    = "region server SIGSTOP/SIGCONT"
)

// rsFault tells the region server faults from the master faults.
var rsFault = map[string]bool{FaultRSCut: true, FaultRSKill: true, FaultRSPause: true}

// FaultKinds lists the kinds in the summary's order.
var FaultKinds = []string{FaultLeaderKill, FaultPause, FaultIsolate, FaultSplit, FaultRSCut, FaultRSKill, FaultRSPause}

// Nemesis runs a Plan's faults on a cluster whose processes run under uids
// of their own (harness.Options.UIDBase), one master fault at a time (so a
// quorum of masters is always meant to be reachable once a fault is
// healed) and, beside them, one region server fault at a time (a region
// server cut holds the master faults off while it waits for the masters
// to expire the server's lease: see Nemesis.stable). A fault
// counts only once it has taken effect (a new leader among the others, a
// region server fenced and expired): Counts says how many did.
type Nemesis struct {
	c   *harness.Cluster
	fw  *Firewall // nil: no partitions
	cl  *client.Client
	log func(format string, args ...any)

	// stable is held by each master fault, and by a region server cut
	// while it waits for the masters to expire the server: every new
	// leader restarts the leases with a grace period (renewals are not
	// replicated), so under back-to-back failovers a lease never expires.
	stable sync.Mutex

	plan Plan

	mu     sync.Mutex
	ran    []Step         // plan.Steps with what happened
	counts map[string]int // faults that took effect
	missed map[string]int // faults that did not take effect
}

// NewNemesis returns a nemesis that runs plan on c. fw may be nil (no
// partitions); log receives one line per fault.
func NewNemesis(c *harness.Cluster, fw *Firewall, plan Plan, log func(format string, args ...any)) (*Nemesis, error) {
	cl, err := client.New(c.AdminAddrs(), client.WithCallTimeout(5*time.Second), client.WithAttemptTimeout(time.Second), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("chaos: nemesis client: %w", err)
	}
	ran := append([]Step(nil), plan.Steps...)
	for i := range ran {
		ran[i].Outcome = "not run"
	}
	return &Nemesis{c: c, fw: fw, cl: cl, log: log, plan: plan, ran: ran,
		counts: map[string]int{}, missed: map[string]int{}}, nil
}

// Record returns the plan as it ran: each step's AtMS is when it started
// (PlannedAtMS when it was meant to), what its target named, how it ended
// and how long it took. Read back by ReadPlan, it replays the faults at
// the times they started.
func (n *Nemesis) Record() Plan {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.plan
	p.Steps = append([]Step(nil), n.ran...)
	sortSteps(p.Steps)
	return p
}

// Close releases the nemesis's client.
func (n *Nemesis) Close() error { return n.cl.Close() }

// Counts returns the faults that took effect, and those that did not, by
// kind.
func (n *Nemesis) Counts() (took, missed map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	took, missed = map[string]int{}, map[string]int{}
	for k, v := range n.counts {
		took[k] = v
	}
	for k, v := range n.missed {
		missed[k] = v
	}
	return took, missed
}

// errNoEffect marks a fault that was injected and healed without taking
// the effect it was meant to (not counted; not a failure of the system).
var errNoEffect = errors.New("fault did not take effect")

// Run runs one lane of the plan (the region server faults, or the master
// faults), each step at its offset from start or as soon as the step
// before it is over, until the lane is done or ctx ends. It returns an
// error only if the cluster did not recover from a fault (no leader, a
// process that does not come back): the run cannot go on meaningfully
// then.
func (n *Nemesis) Run(ctx context.Context, start time.Time, rs bool) error {
	lane := n.plan.Lane(rs)
	for done, i := range lane {
		s := n.plan.Steps[i]
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(s.At()))):
		}
		if ctx.Err() != nil {
			n.log("nemesis: time is up after %d of %d faults of the lane", done, len(lane))
			return nil
		}
		if !rsFault[s.Fault] {
			n.stable.Lock()
		}
		// The step starts once it holds what it needs: its record then
		// says when it really hit.
		began := time.Now()
		if late := began.Sub(start) - s.At(); late > time.Second {
			n.log("nemesis: step %d (%s) starts %v late: the lane's step before, or a region server cut waiting for the masters to expire the server, took longer than planned", i, s.Fault, late.Round(time.Millisecond))
		}
		on, err := n.inject(ctx, s)
		if !rsFault[s.Fault] {
			n.stable.Unlock()
		}
		took := time.Since(began)
		outcome := "took effect"
		switch {
		case err == nil:
		case errors.Is(err, errNoEffect):
			outcome = "no effect: " + err.Error()
		case ctx.Err() != nil:
			outcome = "cut short at the end of the run: " + err.Error()
		default:
			outcome = "did not recover: " + err.Error()
		}
		n.mu.Lock()
		switch {
		case err == nil:
			n.counts[s.Fault]++
		case errors.Is(err, errNoEffect):
			n.missed[s.Fault]++
		}
		planned := s.AtMS
		r := &n.ran[i]
		r.AtMS, r.PlannedAtMS, r.On, r.Outcome, r.TookMS = began.Sub(start).Milliseconds(), &planned, on, outcome, took.Milliseconds()
		n.mu.Unlock()
		switch {
		case err == nil:
			n.log("nemesis: step %d: %s on %s took effect, healed in %v", i, s.Fault, on, took.Round(time.Millisecond))
		case errors.Is(err, errNoEffect):
			n.log("nemesis: step %d: %s on %s did not count: %v", i, s.Fault, on, err)
		case ctx.Err() != nil:
			n.log("nemesis: step %d: %s on %s cut short at the end of the run: %v", i, s.Fault, on, err)
			return nil
		default:
			return fmt.Errorf("step %d: %s on %s: %w", i, s.Fault, on, err)
		}
	}
	return nil
}

// inject runs step s and returns the node it hit.
func (n *Nemesis) inject(ctx context.Context, s Step) (string, error) {
	switch s.Fault {
	case FaultLeaderKill:
		return n.leaderKill(ctx)
	case FaultPause:
		return n.leaderPause(ctx, s.Hold())
	case FaultIsolate:
		return n.isolate(ctx, "", false, s.Hold())
	case FaultSplit:
		return n.isolate(ctx, s.Target, true, s.Hold())
	case FaultRSCut:
		return s.Target, n.rsCut(ctx, s.Target)
	case FaultRSKill:
		return s.Target, n.rsKill(ctx, s.Target, s.Hold())
	case FaultRSPause:
		return s.Target, n.rsPause(ctx, s.Target, s.Hold())
	}
	return "", fmt.Errorf("unknown fault %q", s.Fault)
}

// hold keeps a fault in place for d, or until ctx ends.
func hold(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (n *Nemesis) masterIDs() []string {
	var ids []string
	for _, m := range n.c.Nodes {
		ids = append(ids, m.ID)
	}
	return ids
}

func others(ids []string, not string) []string {
	var out []string
	for _, id := range ids {
		if id != not {
			out = append(out, id)
		}
	}
	return out
}

// leader waits (at most 30 s) for a ready leader and returns it with its
// term.
func (n *Nemesis) leader(ctx context.Context) (string, uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		id, err := n.c.AwaitLeader(wctx)
		if err != nil {
			return "", 0, fmt.Errorf("no leader: %w", err)
		}
		st, err := n.status(wctx, id)
		if err == nil && st.State == "Leader" {
			return id, st.Term, nil
		}
		if wctx.Err() != nil {
			return "", 0, fmt.Errorf("no leader: %w", wctx.Err())
		}
	}
}

func (n *Nemesis) status(ctx context.Context, id string) (admin.StatusJSON, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return n.c.Status(cctx, id)
}

// NewLeaderAmong waits (at most within) until one of ids is a ready leader
// of a term above term, and returns it.
func (n *Nemesis) NewLeaderAmong(ctx context.Context, ids []string, term uint64, within time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		for _, id := range ids {
			st, err := n.status(wctx, id)
			if err == nil && st.State == "Leader" && st.Executor && st.Term > term {
				return id, nil
			}
		}
		select {
		case <-wctx.Done():
			return "", fmt.Errorf("no new leader among %v: %w", ids, wctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rejoined waits (at most 60 s) until master id follows a leader other
// than itself, or leads again with a ready executor.
func (n *Nemesis) rejoined(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		st, err := n.status(wctx, id)
		if err == nil && ((st.State == "Follower" && st.LeaderID != "" && st.LeaderID != id) || (st.State == "Leader" && st.Executor)) {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not rejoin: %w (last: %+v, %v)", id, wctx.Err(), st, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *Nemesis) leaderKill(ctx context.Context) (string, error) {
	l, term, err := n.leader(ctx)
	if err != nil {
		return TargetLeader, err
	}
	if err := n.c.KillErr(l); err != nil {
		return l, fmt.Errorf("kill %s: %w", l, err)
	}
	_, effErr := n.NewLeaderAmong(ctx, others(n.masterIDs(), l), term, 30*time.Second)
	return n.undo(ctx, l, "restart", n.c.RestartErr, effErr)
}

// undo ends a fault on master id: it undoes it (undo, named verb in the
// error), waits for id to rejoin, and then reports effErr, the fault's
// failure to take effect, if any, as errNoEffect.
func (n *Nemesis) undo(ctx context.Context, id, verb string, undo func(id string) error, effErr error) (string, error) {
	if err := undo(id); err != nil {
		return id, fmt.Errorf("%s %s: %w", verb, id, err)
	}
	if err := n.rejoined(ctx, id); err != nil {
		return id, err
	}
	if effErr != nil {
		return id, fmt.Errorf("%w: %w", errNoEffect, effErr)
	}
	return id, nil
}

// leaderPause stops the leader, and once the others have a new leader
// keeps it stopped for d: whatever clients sent it stays queued in its
// sockets meanwhile.
func (n *Nemesis) leaderPause(ctx context.Context, d time.Duration) (string, error) {
	l, term, err := n.leader(ctx)
	if err != nil {
		return TargetLeader, err
	}
	if err := n.c.PauseErr(l); err != nil {
		_ = n.c.ResumeErr(l) // SIGSTOP may have reached some threads
		return l, fmt.Errorf("pause %s: %w", l, err)
	}
	_, effErr := n.NewLeaderAmong(ctx, others(n.masterIDs(), l), term, 30*time.Second)
	if effErr == nil {
		hold(ctx, d)
	}
	return n.undo(ctx, l, "resume", n.c.ResumeErr, effErr)
}

// raftCut returns the rules that cut master m's Raft traffic from the
// other masters (its admin port stays reachable by clients and region
// servers), and with admin also the masters' admin traffic between m and
// the others.
func (n *Nemesis) raftCut(m *harness.Node, admin bool) []Rule {
	mRaft, mAdmin := Port(m.RaftAddr), Port(m.GRPCAddr)
	// Its answers on connections the others opened leave from its Raft
	// port, to whatever port the other side dialed from.
	rules := []Rule{{UID: m.UID, SPort: mRaft}}
	for _, o := range n.c.Nodes {
		if o.ID == m.ID {
			continue
		}
		rules = append(rules, Rule{UID: m.UID, DPort: Port(o.RaftAddr)}, Rule{UID: o.UID, DPort: mRaft})
		if admin {
			rules = append(rules, Rule{UID: m.UID, DPort: Port(o.GRPCAddr)}, Rule{UID: o.UID, DPort: mAdmin})
		}
	}
	return rules
}

// isolate cuts master id (the leader when id is empty) from the other
// masters: its Raft traffic only, or with split also the masters' admin
// traffic between them. It counts once the others have a new leader (id
// was leading) or id has lost touch with the leader; the cut stays d
// longer, during which clients may still reach id's admin port.
func (n *Nemesis) isolate(ctx context.Context, id string, split bool, d time.Duration) (string, error) {
	on := id
	if on == "" {
		on = TargetLeader
	}
	if n.fw == nil {
		return on, fmt.Errorf("%w: no firewall (partitions need root)", errNoEffect)
	}
	l, term, err := n.leader(ctx)
	if err != nil {
		return on, err
	}
	if id == "" {
		id = l
	}
	m := n.c.Node(id)
	heal, err := n.fw.Cut(n.raftCut(m, split))
	if err != nil {
		return id, errors.Join(fmt.Errorf("cut %s: %w", id, err), heal())
	}
	var effErr error
	if id == l {
		_, effErr = n.NewLeaderAmong(ctx, others(n.masterIDs(), id), term, 30*time.Second)
	} else {
		effErr = n.lostTouch(ctx, id)
	}
	if effErr == nil {
		hold(ctx, d)
	}
	return n.undo(ctx, id, "heal", func(string) error { return heal() }, effErr)
}

// lostTouch waits (at most 20 s) until follower id has heard nothing from
// the leader for a second, or turned candidate.
func (n *Nemesis) lostTouch(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		st, err := n.status(wctx, id)
		if err == nil && (st.State == "Candidate" || (st.LastContact != nil && time.Since(*st.LastContact) > time.Second)) {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s kept in touch with the leader: %w", id, wctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pickRS returns region server id if it is running: one region server
// fault at a time heals before the next, so a step's target not running
// means the one before did not heal it.
func (n *Nemesis) pickRS(id string) (*harness.RegionServer, error) {
	for _, have := range n.c.RegionServerIDs() {
		if have != id {
			continue
		}
		if s := n.c.RegionServer(id); s.Running() {
			return s, nil
		}
		return nil, fmt.Errorf("region server %s is not running", id)
	}
	return nil, fmt.Errorf("no region server %s in the cluster", id)
}

func (n *Nemesis) startCode(ctx context.Context, id string) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := n.c.RSRegions(cctx, id)
	return r.GetStartCode(), err
}

// registered waits (at most within) until region server id holds a start
// code other than not.
func (n *Nemesis) registered(ctx context.Context, id string, not uint64, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		sc, err := n.startCode(wctx, id)
		if err == nil && sc != 0 && sc != not {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not register again: %w (last start code %d, %v)", id, wctx.Err(), sc, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rsCut cuts a region server from every master until it has fenced itself
// and the masters have given up its lease (which takes longer than the
// lease: 15 s by the agent's defaults), then heals.
func (n *Nemesis) rsCut(ctx context.Context, id string) error {
	if n.fw == nil {
		return fmt.Errorf("%w: no firewall (partitions need root)", errNoEffect)
	}
	s, err := n.pickRS(id)
	if err != nil {
		return err
	}
	sc, err := n.startCode(ctx, s.ID)
	if err != nil || sc == 0 {
		return fmt.Errorf("%w: %s not registered before the cut (%d, %v)", errNoEffect, s.ID, sc, err)
	}
	var rules []Rule
	for _, m := range n.c.Nodes {
		rules = append(rules, Rule{UID: s.UID, DPort: Port(m.GRPCAddr)}, Rule{UID: m.UID, DPort: Port(s.GRPCAddr)})
	}
	n.stable.Lock()
	heal, err := n.fw.Cut(rules)
	if err != nil {
		n.stable.Unlock()
		return errors.Join(fmt.Errorf("cut %s: %w", s.ID, err), heal())
	}
	effErr := n.fencedAndExpired(ctx, s.ID, sc)
	n.stable.Unlock()
	if err := heal(); err != nil {
		return fmt.Errorf("heal %s: %w", s.ID, err)
	}
	if err := n.registered(ctx, s.ID, sc, 60*time.Second); err != nil {
		return err
	}
	if effErr != nil {
		return fmt.Errorf("%w: %w", errNoEffect, effErr)
	}
	return nil
}

// fencedAndExpired waits until region server id has dropped registration
// sc by itself (its own answer holds no start code) and the masters no
// longer list sc as live.
func (n *Nemesis) fencedAndExpired(ctx context.Context, id string, sc uint64) error {
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	fenced, expired := false, false
	for {
		if !fenced {
			if got, err := n.startCode(wctx, id); err == nil && got == 0 {
				fenced = true
			}
		}
		if fenced && !expired {
			lctx, lcancel := context.WithTimeout(wctx, 3*time.Second)
			srvs, err := n.cl.ListServers(lctx)
			lcancel()
			if err == nil {
				expired = true
				for _, v := range srvs {
					if v.GetId() == id && v.GetStartCode() == sc && v.GetLeaseState() != client.LeaseExpired {
						expired = false
					}
				}
			}
		}
		if fenced && expired {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s cut off: fenced itself %v, masters expired it %v: %w", id, fenced, expired, wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rsKill kills region server id, which stays dead for d.
func (n *Nemesis) rsKill(ctx context.Context, id string, d time.Duration) error {
	s, err := n.pickRS(id)
	if err != nil {
		return err
	}
	sc, _ := n.startCode(ctx, s.ID)
	if err := n.c.KillRSErr(s.ID); err != nil {
		return fmt.Errorf("kill %s: %w", s.ID, err)
	}
	hold(ctx, d)
	if err := n.c.RestartRSErr(s.ID); err != nil {
		return fmt.Errorf("restart %s: %w", s.ID, err)
	}
	return n.registered(ctx, s.ID, sc, 60*time.Second)
}

// rsPause stops region server id for d (see holdRange).
func (n *Nemesis) rsPause(ctx context.Context, id string, d time.Duration) error {
	s, err := n.pickRS(id)
	if err != nil {
		return err
	}
	if err := n.c.PauseRSErr(s.ID); err != nil {
		_ = n.c.ResumeRSErr(s.ID)
		return fmt.Errorf("pause %s: %w", s.ID, err)
	}
	hold(ctx, d)
	if err := n.c.ResumeRSErr(s.ID); err != nil {
		return fmt.Errorf("resume %s: %w", s.ID, err)
	}
	return n.registered(ctx, s.ID, 0, 60*time.Second)
}

// HealAll undoes whatever faults are left: removes every rule, resumes
// every process (SIGCONT to a running one is harmless) and restarts those
// that are not running.
func (n *Nemesis) HealAll() error {
	var errs []error
	if n.fw != nil {
		errs = append(errs, n.fw.Heal())
	}
	for _, m := range n.c.Nodes {
		if m.Running() {
			_ = n.c.ResumeErr(m.ID)
		} else {
			errs = append(errs, n.c.RestartErr(m.ID))
		}
	}
	for _, id := range n.c.RegionServerIDs() {
		if n.c.RegionServer(id).Running() {
			_ = n.c.ResumeRSErr(id)
		} else {
			errs = append(errs, n.c.RestartRSErr(id))
		}
	}
	return errors.Join(errs...)
}

// Summary formats fault counts as table rows.
func Summary(took, missed map[string]int) string {
	var b strings.Builder
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, "  %-32s %5d", k, took[k])
		if missed[k] > 0 {
			fmt.Fprintf(&b, "  (+%d without effect)", missed[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}
