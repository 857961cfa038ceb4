package domain

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/scheduler"
)

// attachTimeout bounds how long LeaderServices waits for the node to be
// attached: a node that gains leadership before its domain is wired is a
// wiring bug, not a reason to hang the leadership change.
const attachTimeout = 10 * time.Second

// LeaderServices starts the leader-only services of term for executor x
// (cluster.Config.LeaderServices): the term-fenced dispatcher, the lease
// managers with every replicated live server granted and given a fresh
// grace period, and their monitors. The returned stop ends them all.
func (d *Domain) LeaderServices(term uint64, x *procedure.Executor) (func(), error) {
	var n Node
	timeout, stopTimer := d.after(attachTimeout)
	defer stopTimer()
	select {
	case <-d.attached:
		n = d.node
	case <-timeout:
		return nil, errors.New("node not attached to the domain")
	}
	svc := &services{
		d:      d,
		n:      n,
		term:   term,
		x:      x,
		log:    d.log.With("term", term),
		stopCh: make(chan struct{}),
		waits:  map[uint64]*opWait{},
		locks:  map[uint64]*lockWait{},
		revoke: map[string]uint64{},
		budget: newRegionBudget(d.cfg.RegionBudget),

		startedAt: d.cfg.Clock.Now(),
		renewed:   map[ServerRef]time.Time{},
	}
	lc := d.cfg.ServerLease
	lc.Clock = d.cfg.Clock
	lc.OnExpire = svc.onServerLeaseExpired
	var err error
	if svc.leases, err = lease.New(lc); err != nil {
		return nil, fmt.Errorf("server leases: %w", err)
	}
	svc.lockLeases = newLockLeases(lease.Config{
		MonitorInterval: lc.MonitorInterval,
		MaxPassTime:     lc.MaxPassTime,
		Clock:           d.cfg.Clock,
		OnExpire:        svc.onLockLeaseExpired,
	})
	dc := d.cfg.Dispatch
	dc.Term, dc.MasterID, dc.Transport = term, n.ID(), d.transport
	dc.OnResult, dc.OnServerFailed = svc.onResult, svc.onServerFailed
	dc.Clock, dc.Logger = d.cfg.Clock, d.cfg.Logger.With("term", term)
	dc.Metrics, dc.Tracer = d.cfg.Metrics, d.dtracer
	dc.NextSeq = func() uint64 { return d.attempts.Add(1) }
	dc.ClusterID = d.clusterID
	if svc.disp, err = dispatch.New(dc); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	// Only grants and expiries are replicated: every server the log says
	// is live gets a lease, and all of them a fresh grace period, since
	// the previous leader's renewal times are unknown here.
	servers, err := scanServers(kvReader{Get: n.FSM().Get, Scan: n.FSM().Scan})
	if err != nil {
		svc.disp.Stop()
		return nil, err
	}
	for id, s := range servers {
		if s.State == ServerLive {
			svc.leases.Grant(holderOf(ServerRef{id, s.StartCode}))
		}
	}
	svc.leases.GraceAll()
	svc.leases.Start()
	svc.lockLeases.Start()
	// Maintenance mode is replicated: a leader that takes over while it is
	// on sends nothing either.
	m, err := getMaintenance(kvReader{Get: n.FSM().Get, Scan: n.FSM().Scan})
	if err != nil {
		svc.log.Error("reading maintenance mode; dispatch paused until it is set again", "error", err)
		m.On = true
	}
	svc.applyMaintenance(m)
	svc.startRestoreHold()

	x.AddChangeListener(svc.onTransition)
	x.AddLockWaitListener(svc.onLockWait)

	d.mu.Lock()
	d.svc = svc
	d.mu.Unlock()
	svc.background(svc.reconcileWhenReady)
	svc.log.Info("leader services started", "servers", len(servers))
	return func() {
		d.mu.Lock()
		if d.svc == svc {
			d.svc = nil
		}
		d.mu.Unlock()
		svc.stop()
	}, nil
}

// holderOf is the lease holder of a server incarnation: "rs/<id>/<start code>".
// Incarnations hold separate leases, so the late expiry of an old one is
// never taken for the new one's.
func holderOf(ref ServerRef) string {
	return "rs/" + ref.ID + "/" + strconv.FormatUint(ref.StartCode, 10)
}

func refOfHolder(h string) (ServerRef, bool) {
	h, ok := strings.CutPrefix(h, "rs/")
	if !ok {
		return ServerRef{}, false
	}
	i := strings.LastIndexByte(h, '/')
	if i < 0 {
		return ServerRef{}, false
	}
	sc, err := strconv.ParseUint(h[i+1:], 10, 64)
	if err != nil {
		return ServerRef{}, false
	}
	return ServerRef{ID: h[:i], StartCode: sc}, true
}

func lockHolder(id uint64) string { return "lock/" + strconv.FormatUint(id, 10) }

// services are one term's leader-only services.
type services struct {
	d          *Domain
	n          Node
	term       uint64
	x          *procedure.Executor
	log        hclog.Logger
	disp       *dispatch.Dispatcher
	leases     *lease.Manager // region servers
	lockLeases *lockLeases    // external lock holders
	servers    serverRecords  // decoded server records

	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// regMu serializes the read-modify-write of server records
	// (registrations, expiries).
	regMu sync.Mutex

	// watchMu guards watchers, woken at their procedure's next persisted
	// transition (watchProc), by proc id. Apart from mu: the executor's
	// listener takes it.
	watchMu  sync.Mutex
	watchers map[uint64]map[chan struct{}]struct{}

	mu      sync.Mutex
	stopped bool
	waits   map[uint64]*opWait   // by proc id: a region procedure waiting for an op
	locks   map[uint64]*lockWait // by lock proc id
	revoke  map[string]uint64    // server id → start code told "expired" at its next heartbeat
	// budget bounds the region procedures of table procedures in flight
	// (Config.RegionBudget).
	budget *regionBudget
	// startedAt is when this term's services started: every renewal a
	// predecessor granted happened before it (see renewedAt).
	startedAt time.Time
	// renewed is, per incarnation, the latest renewal this term granted
	// (or was about to grant: see Heartbeat), for fencing proofs.
	renewed  map[ServerRef]time.Time
	startSeq uint64
	load     map[string]int // regions per server, cached for target picks
	loadAt   time.Time
	// loadScan is how long the last scan counting load took, and
	// loadScanning is set while one runs (see refreshLoad).
	loadScan     time.Duration
	loadScanning bool
	// picked counts every pick ever made, per server: a scan adds to its
	// counts the picks made while it ran, which the records it read may
	// not show yet (see refreshLoad).
	picked map[string]int
	// closedTables: rolled-back trees whose table's regions were all sent
	// a close (closeTableOnce), by root id.
	closedTables map[uint64]bool
	// batches: a procedure's ops sent together (opBatch), by proc id.
	batches map[uint64]*opBatch
	// rbClosed: the regions a failed rollback step confirmed closed, by
	// proc id, region and incarnation (noteClosed).
	rbClosed map[uint64]map[string]ServerRef
	// firstOpenKids: the children of each running create whose open
	// firstOpens sent, by create (forgetFirstOpens).
	firstOpenKids map[uint64][]uint64

	// maintMu guards maintEv: while maintenance mode is on, the event that
	// procedures waiting to dispatch suspend on, woken when it goes off;
	// and maintWrites, the maintenance writes not resolved yet (while one
	// is, dispatch is not synced from the state: setMaintenance).
	maintMu     sync.Mutex
	maintEv     *scheduler.Event
	maintWrites int
	// repairMu serializes repair calls (repair.go): each plans against the
	// state the previous one left. repairSeq is the last record's sequence
	// number, 0 until read from the state.
	repairMu  sync.Mutex
	repairSeq uint64
}

func (s *services) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		close(s.stopCh)
		s.leases.Stop()
		s.lockLeases.Stop()
		s.disp.Stop()
		s.wg.Wait()
		s.log.Info("leader services stopped")
	})
}

func (s *services) isStopped() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// reader reads the local FSM (on the leader: every committed entry of
// this term's executor and of the registrations is applied).
func (s *services) reader() reader {
	f := s.n.FSM()
	return kvReader{Get: f.Get, Scan: f.Scan}
}

// commit writes domain mutations through Raft, fenced by the term: the FSM
// refuses the entry in any other term, so a deposed leader's registration
// or expiry never lands.
func (s *services) commit(ctx context.Context, muts ...raftfsm.Mutation) error {
	data, err := raftfsm.EncodeFencedProcBatch(s.term, raftfsm.Write{Mutations: muts})
	if err != nil {
		return err
	}
	f := s.n.Raft().Apply(data, s.d.cfg.ApplyTimeout)
	if err := s.awaitRaft(ctx, "domain write", f); err != nil {
		return err
	}
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		return fmt.Errorf("domain write refused: %w", rerr)
	}
	return nil
}

// awaitRaft waits for f until ctx ends or the services stop. Losing
// leadership, however raft words it (not leader, leadership lost, shut
// down), is cluster.ErrNotLeader, so callers answer UNAVAILABLE with a
// leader hint.
func (s *services) awaitRaft(ctx context.Context, what string, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopCh:
		return fmt.Errorf("%s: %w", what, cluster.ErrNotLeader)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%s: %w (%v)", what, cluster.ErrNotLeader, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// clusterID is the cluster id in the local state ("" if none): the
// leader tells it to region servers, which tell a restored cluster from
// the one they lived through by it.
func (d *Domain) clusterID() string {
	n := d.nodeOrNil()
	if n == nil {
		return ""
	}
	v, _ := n.FSM().Get(cluster.ClusterIDKey)
	return string(v)
}

// nextStartCode is term<<32 | n: unique across terms (a term has one
// leader) and increasing, like HBase's start codes (a timestamp).
func (s *services) nextStartCode() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startSeq++
	return s.term<<32 | s.startSeq&0xffffffff
}

// reconcileWhenReady waits for the executor to be published (it has loaded
// every procedure), then repairs what the previous leader may have left
// half done: crash procedures owed to expired or superseded incarnations
// that still hold regions, and leases of external locks.
func (s *services) reconcileWhenReady() {
	for {
		changed := s.n.ExecutorChanged()
		if x, err := s.n.Executor(); err == nil && x == s.x {
			break
		}
		select {
		case <-s.stopCh:
			return
		case <-changed:
		}
	}
	r := s.reader()
	servers, err := scanServers(r)
	if err != nil {
		s.log.Error("reconcile: reading servers", "error", err)
		return
	}
	owed := map[ServerRef]bool{}
	err = scanRegions(r, func(_ string, rg Region) bool {
		if rg.Server == "" || (rg.State != RegionOpen && rg.State != RegionOpening && rg.State != RegionClosing) {
			return true
		}
		ref := ServerRef{rg.Server, rg.StartCode}
		if srv, ok := servers[rg.Server]; !ok || srv.StartCode != rg.StartCode || srv.State != ServerLive {
			owed[ref] = true
		}
		return true
	})
	if err != nil {
		s.log.Error("reconcile: reading regions", "error", err)
	}
	for ref := range owed {
		s.submitCrash(ref, "reconcile at leadership start")
	}
	for _, info := range s.x.List(procedure.Filter{Type: TypeLock}) {
		if info.State.Terminal() {
			continue
		}
		// Lease times are not replicated: every lock gets a full lease of
		// its own length to find this leader.
		if _, ok := s.lockLeases.Length(lockHolder(info.ID)); !ok {
			s.logLeaseErr(info.ID, s.lockLeases.Grant(lockHolder(info.ID), s.d.lockLeaseOf(info.ID)))
		}
	}
}

// submitCrash submits the ServerCrashProcedure of ref, once per need: the
// nonce makes every later submission for the same incarnation return the
// first one's id while that one is unfinished. One that has already ended
// is not an answer to a new need (regions recorded on the incarnation
// again, found by a registration or a new leader's reconcile): a new
// procedure is submitted, under a nonce derived from the ended one's id,
// so concurrent callers still share it. Retries in the background while
// the executor is not accepting yet.
func (s *services) submitCrash(ref ServerRef, why string) {
	submit := func() error {
		_, err := s.submitCrashOnce(ref, why)
		return err
	}
	err := submit()
	if err == nil {
		return
	}
	s.log.Warn("submitting server crash procedure failed; retrying", "server", ref.String(), "error", err)
	s.background(func() {
		// A new leader's executor refuses submissions until it has loaded
		// the store (seconds at a million regions): the first retry goes
		// as soon as it has, not at the next backoff.
		loaded := s.x.Loaded()
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
			wait, stopWait := s.d.after(delay)
			select {
			case <-s.stopCh:
				stopWait()
				return
			case <-wait:
			case <-loaded:
				stopWait()
				loaded = nil
			}
			err := submit()
			if err == nil || errors.Is(err, procedure.ErrStopped) {
				return
			}
			if errors.Is(err, procedure.ErrNotAllowed) || errors.Is(err, procedure.ErrInvalid) {
				// Held (unloadable) or refused: retrying cannot help; the
				// executor reports held procedures as load problems.
				s.log.Error("server crash procedure cannot be submitted", "server", ref.String(), "error", err)
				return
			}
		}
	})
}

// submitCrashOnce submits the ServerCrashProcedure of ref (see
// submitCrash) and returns its id: the unfinished one under way if there
// is one.
func (s *services) submitCrashOnce(ref ServerRef, why string) (uint64, error) {
	nonce := fmt.Sprintf("scp-%s-%d", ref.ID, ref.StartCode)
	for range maxCrashResubmits {
		// A procedure the nonce did not name before this submission was
		// made for this need (by this call or a concurrent one), even if it
		// has ended by the time it is looked at: a crash with nothing left
		// to reassign ends within a millisecond, and taking it for an old
		// one ran another for nothing.
		_, known := s.x.LookupNonce(crashOwner, nonce)
		id, err := s.x.Submit(&ServerCrash{Server: ref}, procedure.SubmitOptions{Nonce: nonce, Owner: crashOwner})
		if err != nil {
			return 0, err
		}
		info, err := s.x.Get(id)
		if err != nil || !info.State.Terminal() || !known {
			s.log.Info("server crash procedure", "server", ref.String(), "proc_id", id, "why", why)
			return id, nil
		}
		// Ended before this need arose: the nonce answered with it.
		nonce = fmt.Sprintf("scp-%s-%d-after-%d", ref.ID, ref.StartCode, id)
	}
	return 0, fmt.Errorf("server crash of %s: %d ended procedures in a row", ref, maxCrashResubmits)
}

// crashOwner owns the nonces of the crash procedures the master submits.
const crashOwner = "master"

// maxCrashResubmits bounds the chain of ended crash procedures submitCrash
// follows for one call (each link is a real need that arose after the
// previous one ended, so a long chain means something else is wrong).
const maxCrashResubmits = 8

// background runs f in a goroutine that stop waits for, unless the
// services are stopping already.
func (s *services) background(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// expire makes incarnation ref expired in the replicated state, if it is
// still the live one, and starts its crash procedure.
func (s *services) expire(ref ServerRef, why string) {
	if err := s.markExpired(ref); err != nil {
		// The crash procedure fences the server itself; go on.
		s.log.Warn("recording server expiry failed", "server", ref.String(), "error", err)
	}
	s.log.Warn("region server expired", "server", ref.String(), "why", why)
	s.submitCrash(ref, why)
}

// markExpired records incarnation ref expired in the replicated state, if
// it is still the live one: from then on it is fenced (see the package
// doc).
func (s *services) markExpired(ref ServerRef) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	srv, ok, err := getServer(s.reader(), ref.ID)
	if err != nil || !ok || srv.StartCode != ref.StartCode || srv.State != ServerLive {
		return err
	}
	srv.State = ServerExpired
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.ApplyTimeout)
	defer cancel()
	return s.commit(ctx, raftfsm.Put(ServerKey(ref.ID), mustJSON(srv)))
}

// onServerLeaseExpired is the server lease monitor's OnExpire.
func (s *services) onServerLeaseExpired(info lease.Info) {
	ref, ok := refOfHolder(info.Holder)
	if !ok || s.isStopped() {
		return
	}
	s.expire(ref, fmt.Sprintf("lease expired (last renewal %s)", info.LastRenewal.Format(time.RFC3339Nano)))
}

// onServerFailed is the dispatcher's OnServerFailed.
//
// A server the dispatcher cannot reach is not expired at once: it may be
// alive and serving its regions, and reassigning them now would open them
// twice (HBASE-14012, HBASE-21811). Instead its lease is revoked: it is no
// longer renewed, and the server's next heartbeat is answered expired =
// true, upon which it drops every region and registers again (the new
// registration then starts the crash procedure of the old incarnation at
// once). A server that does not heartbeat at all expires with its lease,
// one hard limit after its last renewal.
func (s *services) onServerFailed(serverID string, err error) {
	if errors.Is(err, dispatch.ErrWrongStartCode) {
		// The incarnation the ops were for is gone; the server registered
		// again, which already dealt with the old one's regions.
		s.log.Info("dispatcher met a restarted region server", "server", serverID, "error", err)
		return
	}
	srv, ok, rerr := getServer(s.reader(), serverID)
	if rerr != nil || !ok || srv.State != ServerLive {
		return
	}
	s.mu.Lock()
	s.revoke[serverID] = srv.StartCode
	s.mu.Unlock()
	s.log.Error("region server unreachable: its lease is revoked; it expires at its next heartbeat or at the hard limit",
		"server", ServerRef{serverID, srv.StartCode}.String(), "error", err)
}

func (s *services) revoked(ref ServerRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.revoke[ref.ID]
	return ok && sc == ref.StartCode
}
