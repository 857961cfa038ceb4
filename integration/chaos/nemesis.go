package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Nemesis injects faults into a cluster whose processes run under uids of
// their own (harness.Options.UIDBase), one master fault at a time (so a
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

	mu     sync.Mutex
	rng    *rand.Rand
	counts map[string]int // faults that took effect
	missed map[string]int // faults that did not take effect
}

// NewNemesis returns a nemesis of c. fw may be nil (no partitions); log
// receives one line per fault.
func NewNemesis(c *harness.Cluster, fw *Firewall, seed uint64, log func(format string, args ...any)) (*Nemesis, error) {
	cl, err := client.New(c.AdminAddrs(), client.WithCallTimeout(5*time.Second), client.WithAttemptTimeout(time.Second), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("chaos: nemesis client: %w", err)
	}
	return &Nemesis{c: c, fw: fw, cl: cl, log: log, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts: map[string]int{}, missed: map[string]int{}}, nil
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

func (n *Nemesis) intn(k int) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rng.IntN(k)
}

// between returns a random duration in [lo, hi).
func (n *Nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.intn(int(hi-lo)))
}

// errNoEffect marks a fault that was injected and healed without taking
// the effect it was meant to (not counted; not a failure of the system).
var errNoEffect = errors.New("fault did not take effect")

// Schedule is a list of fault kinds to run in order.
type Schedule []string

// NewSchedule returns counts[k] faults of each kind k, shuffled.
func (n *Nemesis) NewSchedule(counts map[string]int) Schedule {
	var s Schedule
	for _, k := range FaultKinds {
		for range counts[k] {
			s = append(s, k)
		}
	}
	n.mu.Lock()
	n.rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	n.mu.Unlock()
	return s
}

// Run runs the schedule, one fault after the other with a random pause in
// between, until it is done or ctx ends. It returns an error only if the
// cluster did not recover from a fault (no leader, a process that does
// not come back): the run cannot go on meaningfully then.
func (n *Nemesis) Run(ctx context.Context, s Schedule) error {
	for i, kind := range s {
		if ctx.Err() != nil {
			n.log("nemesis: time is up after %d of %d faults", i, len(s))
			return nil
		}
		start := time.Now()
		if !rsFault[kind] {
			n.stable.Lock()
		}
		err := n.inject(ctx, kind)
		if !rsFault[kind] {
			n.stable.Unlock()
		}
		n.mu.Lock()
		switch {
		case err == nil:
			n.counts[kind]++
		case errors.Is(err, errNoEffect):
			n.missed[kind]++
		}
		n.mu.Unlock()
		switch {
		case err == nil:
			n.log("nemesis: %s took effect, healed in %v", kind, time.Since(start).Round(time.Millisecond))
		case errors.Is(err, errNoEffect):
			n.log("nemesis: %s did not count: %v", kind, err)
		case ctx.Err() != nil:
			n.log("nemesis: %s cut short at the end of the run: %v", kind, err)
			return nil
		default:
			return fmt.Errorf("%s: %w", kind, err)
		}
		// Pacing: let the clients see a healthy cluster for a moment
		// between two faults.
		select {
		case <-ctx.Done():
		case <-time.After(n.between(200*time.Millisecond, time.Second)):
		}
	}
	return nil
}

func (n *Nemesis) inject(ctx context.Context, kind string) error {
	switch kind {
	case FaultLeaderKill:
		return n.leaderKill(ctx)
	case FaultPause:
		return n.leaderPause(ctx)
	case FaultIsolate:
		return n.isolate(ctx, "", false)
	case FaultSplit:
		ids := n.masterIDs()
		return n.isolate(ctx, ids[n.intn(len(ids))], true)
	case FaultRSCut:
		return n.rsCut(ctx)
	case FaultRSKill:
		return n.rsKill(ctx)
	case FaultRSPause:
		return n.rsPause(ctx)
	}
	return fmt.Errorf("unknown fault %q", kind)
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

func (n *Nemesis) leaderKill(ctx context.Context) error {
	l, term, err := n.leader(ctx)
	if err != nil {
		return err
	}
	if err := n.c.KillErr(l); err != nil {
		return fmt.Errorf("kill %s: %w", l, err)
	}
	_, effErr := n.NewLeaderAmong(ctx, others(n.masterIDs(), l), term, 30*time.Second)
	if err := n.c.RestartErr(l); err != nil {
		return fmt.Errorf("restart %s: %w", l, err)
	}
	if err := n.rejoined(ctx, l); err != nil {
		return err
	}
	if effErr != nil {
		return fmt.Errorf("%w: %w", errNoEffect, effErr)
	}
	return nil
}

func (n *Nemesis) leaderPause(ctx context.Context) error {
	l, term, err := n.leader(ctx)
	if err != nil {
		return err
	}
	if err := n.c.PauseErr(l); err != nil {
		_ = n.c.ResumeErr(l) // SIGSTOP may have reached some threads
		return fmt.Errorf("pause %s: %w", l, err)
	}
	_, effErr := n.NewLeaderAmong(ctx, others(n.masterIDs(), l), term, 30*time.Second)
	if effErr == nil {
		// Pacing: the others carry on without it for a while; whatever
		// clients sent it stays queued in its sockets.
		time.Sleep(n.between(300*time.Millisecond, 2*time.Second))
	}
	if err := n.c.ResumeErr(l); err != nil {
		return fmt.Errorf("resume %s: %w", l, err)
	}
	if err := n.rejoined(ctx, l); err != nil {
		return err
	}
	if effErr != nil {
		return fmt.Errorf("%w: %w", errNoEffect, effErr)
	}
	return nil
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
// was leading) or id has lost touch with the leader.
func (n *Nemesis) isolate(ctx context.Context, id string, split bool) error {
	if n.fw == nil {
		return fmt.Errorf("%w: no firewall (partitions need root)", errNoEffect)
	}
	l, term, err := n.leader(ctx)
	if err != nil {
		return err
	}
	if id == "" {
		id = l
	}
	m := n.c.Node(id)
	heal, err := n.fw.Cut(n.raftCut(m, split))
	if err != nil {
		return errors.Join(fmt.Errorf("cut %s: %w", id, err), heal())
	}
	var effErr error
	if id == l {
		_, effErr = n.NewLeaderAmong(ctx, others(n.masterIDs(), id), term, 30*time.Second)
	} else {
		effErr = n.lostTouch(ctx, id)
	}
	if effErr == nil {
		// Pacing: the cut stays for a while, during which clients may
		// still reach id's admin port.
		time.Sleep(n.between(500*time.Millisecond, 3*time.Second))
	}
	if err := heal(); err != nil {
		return fmt.Errorf("heal %s: %w", id, err)
	}
	if err := n.rejoined(ctx, id); err != nil {
		return err
	}
	if effErr != nil {
		return fmt.Errorf("%w: %w", errNoEffect, effErr)
	}
	return nil
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

// pickRS returns a running region server, at random.
func (n *Nemesis) pickRS() (*harness.RegionServer, error) {
	var up []*harness.RegionServer
	for _, id := range n.c.RegionServerIDs() {
		if s := n.c.RegionServer(id); s.Running() {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		return nil, errors.New("no region server is running")
	}
	return up[n.intn(len(up))], nil
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
func (n *Nemesis) rsCut(ctx context.Context) error {
	if n.fw == nil {
		return fmt.Errorf("%w: no firewall (partitions need root)", errNoEffect)
	}
	s, err := n.pickRS()
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

func (n *Nemesis) rsKill(ctx context.Context) error {
	s, err := n.pickRS()
	if err != nil {
		return err
	}
	sc, _ := n.startCode(ctx, s.ID)
	if err := n.c.KillRSErr(s.ID); err != nil {
		return fmt.Errorf("kill %s: %w", s.ID, err)
	}
	// Pacing: dead for a moment before it comes back.
	time.Sleep(n.between(100*time.Millisecond, 2*time.Second))
	if err := n.c.RestartRSErr(s.ID); err != nil {
		return fmt.Errorf("restart %s: %w", s.ID, err)
	}
	return n.registered(ctx, s.ID, sc, 60*time.Second)
}

func (n *Nemesis) rsPause(ctx context.Context) error {
	s, err := n.pickRS()
	if err != nil {
		return err
	}
	if err := n.c.PauseRSErr(s.ID); err != nil {
		_ = n.c.ResumeRSErr(s.ID)
		return fmt.Errorf("pause %s: %w", s.ID, err)
	}
	// Pacing: sometimes shorter than its self-fence period (6 s), so it
	// comes back still holding its regions, sometimes longer.
	time.Sleep(n.between(time.Second, 9*time.Second))
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
