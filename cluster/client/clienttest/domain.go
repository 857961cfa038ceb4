package clienttest

// The fake's domain API: namespaces, tables, regions, region servers and
// external locks, kept in memory, with just enough of the real cluster's
// behaviour for client and CLI tests.
//
//   - Changes run as procedures in the shared procedure table, so Wait and
//     WatchProcedure work on them. Each checks its preconditions at once (a
//     failed check: FAILED, then ROLLEDBACK with the reason StepDelay later,
//     like "fail"), shows its intermediate state (a table CREATING, a region
//     CLOSING with its proc_id, ...) and finishes StepDelay later: SUCCESS.
//   - A known nonce returns the first procedure's id before anything is
//     checked, so a retry after the first submission succeeded does not
//     trip on the state that submission created. LoseSubmitReplies applies
//     to these submissions too.
//   - The namespace "default" exists from the start; no region server does
//     (AddServer). Regions are placed on the live server holding the fewest;
//     with none live they stay OFFLINE and the procedure still succeeds.
//   - Region names are "ns:table,rN"; a region server hosts, by its own
//     answer, the OPEN regions assigned to it unless SetHosted says
//     otherwise.
//   - Locks conflict when they name the same entity of the same kind and
//     either is exclusive (no hierarchy); a conflicting request WAITs and is
//     granted, in id order, when the holders release or expire. A lock's
//     lease expires LockTimeout (SetLockTimeout) after its last heartbeat,
//     on the lock clock (SetLockClock; the real one by default); expiry is
//     noticed on the next lock call.

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
)

// DefaultLockTimeout is the fake's lock lease unless SetLockTimeout changes
// it.
const DefaultLockTimeout = 2 * time.Second

// Names as HBase allows them: a namespace of word characters, a table
// qualifier that may also hold '.' and '-' but not start with them.
var (
	nsName    = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	tableName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

type domain struct {
	namespaces  map[string]bool
	tables      map[string]*adminpb.Table // by "ns:name"
	servers     map[string]*server
	locks       map[uint64]*lock
	lockTimeout time.Duration
	lockClock   clock.Clock         // what lock leases are measured on
	nonces      map[string][]string // per method, the nonce of each call received
	startCode   uint64
}

type server struct {
	info   *adminpb.Server // region_count is computed when listed
	hosted []string        // the server's own answer, when set by SetHosted
	set    bool
}

type lock struct {
	id        uint64
	kind      string
	names     []string
	exclusive bool
	state     string
	lastBeat  time.Time
}

// domain returns the domain state, creating it on first use. c.mu is held.
func (c *Cluster) domain() *domain {
	if c.dom == nil {
		c.dom = &domain{namespaces: map[string]bool{"default": true}, tables: map[string]*adminpb.Table{},
			servers: map[string]*server{}, locks: map[uint64]*lock{}, lockTimeout: DefaultLockTimeout,
			lockClock: clock.Real{}, nonces: map[string][]string{}}
	}
	return c.dom
}

// AddServer registers a live region server.
func (c *Cluster) AddServer(id, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.domain()
	d.startCode++
	d.servers[id] = &server{info: &adminpb.Server{Id: id, Address: addr, StartCode: 1_700_000_000_000 + d.startCode,
		LeaseState: "live", LastRenewalUnixMs: time.Now().UnixMilli()}}
}

// SetLeaseState sets a region server's lease state: live, suspect or
// expired. Only live servers are given regions.
func (c *Cluster) SetLeaseState(id, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.domain().servers[id]; s != nil {
		s.info.LeaseState = state
	}
}

// SetHosted makes the region server answer that it hosts exactly these
// regions, whatever the master's state says.
func (c *Cluster) SetHosted(id string, regions ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.domain().servers[id]; s != nil {
		s.hosted, s.set = slices.Clone(regions), true
	}
}

// SetLockTimeout sets the lease of locks acquired from now on and of the
// heartbeats renewing them.
func (c *Cluster) SetLockTimeout(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.domain().lockTimeout = d
}

// SetLockClock makes lock leases run on clk (default: the real clock).
// With a clock.Manual the test decides when a lease runs out: no stall of
// a loaded machine between two heartbeats can expire a lock.
func (c *Cluster) SetLockClock(clk clock.Clock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.domain().lockClock = clk
}

// Table returns a copy of table "ns:name", nil if there is none.
func (c *Cluster) Table(qualified string) *adminpb.Table {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.domain().tables[qualified]; t != nil {
		return proto.Clone(t).(*adminpb.Table)
	}
	return nil
}

// LockState returns the state of lock id, "" if there is none.
func (c *Cluster) LockState(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.domain()
	c.expireLocks(d)
	if l := d.locks[id]; l != nil {
		return l.state
	}
	return ""
}

// Nonces returns the nonce of each call of method (e.g. "CreateTable")
// the leader received, in order.
func (c *Cluster) Nonces(method string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.domain().nonces[method])
}

// begin is the preamble of a domain call: serve's checks, then the
// cluster's lock, held until the returned function is called, and the
// domain state.
func (n *Node) begin(method, nonce string) (*domain, func(), error) {
	if err := n.serve(method); err != nil {
		return nil, nil, err
	}
	c := n.c
	c.mu.Lock()
	d := c.domain()
	d.nonces[method] = append(d.nonces[method], nonce)
	return d, c.mu.Unlock, nil
}

// known returns the procedure a nonce already started, if any. c.mu is
// held.
func (c *Cluster) known(nonce string) (uint64, bool) {
	id, ok := c.nonces[nonce]
	return id, ok && nonce != ""
}

// reply answers a submission, unless LoseSubmitReplies says to lose it.
// c.mu is held.
func (c *Cluster) reply(id uint64) (*adminpb.SubmitProcedureResponse, error) {
	if c.lossy > 0 {
		c.lossy--
		return nil, status.Error(codes.Unavailable, "leader lost before replying")
	}
	return &adminpb.SubmitProcedureResponse{Id: id}, nil
}

// run adds a procedure of type typ and runs it: prepare at once, finish
// StepDelay later; a non-empty message from either rolls it back with that
// error. c.mu is held; prepare and finish run with it held.
func (c *Cluster) run(typ, nonce string, prepare func(id uint64) string, finish func(id uint64) string) uint64 {
	c.nextID++
	id := c.nextID
	now := time.Now().UnixMilli()
	c.procs[id] = &adminpb.Procedure{Id: id, RootId: id, Type: typ, State: "RUNNABLE", Nonce: nonce,
		SubmittedUnixMs: now, UpdatedUnixMs: now}
	if nonce != "" {
		c.nonces[nonce] = id
	}
	c.notify()
	rollback := func(msg string) {
		c.setState(id, "FAILED", msg)
		c.later(StepDelay, func() { c.setState(id, "ROLLEDBACK", "") })
	}
	if msg := prepare(id); msg != "" {
		rollback(msg)
		return id
	}
	c.later(StepDelay, func() {
		if msg := finish(id); msg != "" {
			rollback(msg)
			return
		}
		c.setState(id, "SUCCESS", "")
	})
	return id
}

func qualify(ns, name string) string {
	if ns == "" {
		ns = "default"
	}
	return ns + ":" + name
}

// live returns the live servers, by id.
func (d *domain) live() []*server {
	var out []*server
	for _, s := range d.servers {
		if s.info.LeaseState == "live" {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *server) int { return strings.Compare(a.info.Id, b.info.Id) })
	return out
}

// regions returns every region, in table then region order.
func (d *domain) regions() []*adminpb.Region {
	var out []*adminpb.Region
	for _, k := range sortedKeys(d.tables) {
		out = append(out, d.tables[k].Regions...)
	}
	return out
}

func (d *domain) count(server string) int {
	n := 0
	for _, r := range d.regions() {
		if r.Server == server {
			n++
		}
	}
	return n
}

// place opens r on the live server holding the fewest regions, other than
// avoid; OFFLINE if there is none.
func (d *domain) place(r *adminpb.Region, avoid string) {
	var best *server
	for _, s := range d.live() {
		if s.info.Id != avoid && (best == nil || d.count(s.info.Id) < d.count(best.info.Id)) {
			best = s
		}
	}
	r.ProcId = 0
	if best == nil {
		r.State, r.Server = "OFFLINE", ""
		return
	}
	r.State, r.Server = "OPEN", best.info.Id
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (n *Node) CreateNamespace(_ context.Context, r *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin("CreateNamespace", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	if !nsName.MatchString(r.Name) {
		return nil, status.Errorf(codes.InvalidArgument, "namespace name %q: want letters, digits and _", r.Name)
	}
	id := c.run("CreateNamespaceProcedure", r.Nonce, func(uint64) string {
		if d.namespaces[r.Name] {
			return fmt.Sprintf("namespace %q already exists", r.Name)
		}
		return ""
	}, func(uint64) string {
		if d.namespaces[r.Name] {
			return fmt.Sprintf("namespace %q already exists", r.Name)
		}
		d.namespaces[r.Name] = true
		return ""
	})
	return c.reply(id)
}

func (n *Node) DeleteNamespace(_ context.Context, r *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin("DeleteNamespace", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	check := func(uint64) string {
		switch {
		case r.Name == "default":
			return `namespace "default" cannot be deleted`
		case !d.namespaces[r.Name]:
			return fmt.Sprintf("namespace %q not found", r.Name)
		}
		for _, t := range d.tables {
			if t.Namespace == r.Name {
				return fmt.Sprintf("namespace %q holds tables: delete them first", r.Name)
			}
		}
		return ""
	}
	id := c.run("DeleteNamespaceProcedure", r.Nonce, check, func(id uint64) string {
		if msg := check(id); msg != "" {
			return msg
		}
		delete(d.namespaces, r.Name)
		return ""
	})
	return c.reply(id)
}

func (n *Node) ListNamespaces(context.Context, *adminpb.ListNamespacesRequest) (*adminpb.ListNamespacesResponse, error) {
	d, unlock, err := n.begin("ListNamespaces", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	return &adminpb.ListNamespacesResponse{Namespaces: sortedKeys(d.namespaces)}, nil
}

func (n *Node) GetNamespace(_ context.Context, r *adminpb.GetNamespaceRequest) (*adminpb.Namespace, error) {
	d, unlock, err := n.begin("GetNamespace", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, ok := d.namespaces[r.GetName()]; !ok {
		return nil, status.Errorf(codes.NotFound, "namespace %q", r.GetName())
	}
	return &adminpb.Namespace{Name: r.GetName()}, nil
}

func (n *Node) CreateTable(_ context.Context, r *adminpb.CreateTableRequest) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin("CreateTable", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	ns := cmp.Or(r.Namespace, "default")
	regions := cmp.Or(r.Regions, 1)
	switch {
	case !nsName.MatchString(ns):
		return nil, status.Errorf(codes.InvalidArgument, "namespace name %q: want letters, digits and _", ns)
	case !tableName.MatchString(r.Name):
		return nil, status.Errorf(codes.InvalidArgument, "table name %q: want letters, digits, _, . and -, not starting with . or -", r.Name)
	case regions < 1 || regions > 10000:
		return nil, status.Errorf(codes.InvalidArgument, "%d regions: want 1 to 10000", regions)
	}
	q := qualify(ns, r.Name)
	id := c.run("CreateTableProcedure", r.Nonce, func(id uint64) string {
		switch {
		case !d.namespaces[ns]:
			return fmt.Sprintf("namespace %q not found", ns)
		case d.tables[q] != nil:
			return fmt.Sprintf("table %s already exists", q)
		}
		t := &adminpb.Table{Namespace: ns, Name: r.Name, State: "CREATING"}
		for i := range regions {
			t.Regions = append(t.Regions, &adminpb.Region{Name: fmt.Sprintf("%s,r%d", q, i), Table: q, State: "OFFLINE", ProcId: id})
		}
		d.tables[q] = t
		return ""
	}, func(uint64) string {
		t := d.tables[q]
		for _, rg := range t.Regions {
			d.place(rg, "")
		}
		t.State = "ENABLED"
		return ""
	})
	return c.reply(id)
}

// tableProc runs a procedure on an existing table in state from: it is in
// state during the procedure, and finish completes it.
func (n *Node) tableProc(method, typ string, r *adminpb.TableRequest, from, during string, finish func(d *domain, q string)) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin(method, r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	q := qualify(r.Namespace, r.Name)
	id := c.run(typ, r.Nonce, func(uint64) string {
		t := d.tables[q]
		switch {
		case t == nil:
			return fmt.Sprintf("table %s not found", q)
		case t.State != from:
			return fmt.Sprintf("table %s is %s, not %s", q, t.State, from)
		}
		t.State = during
		return ""
	}, func(uint64) string {
		finish(d, q)
		return ""
	})
	return c.reply(id)
}

func (n *Node) DeleteTable(_ context.Context, r *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return n.tableProc("DeleteTable", "DeleteTableProcedure", r, "DISABLED", "DELETING", func(d *domain, q string) {
		delete(d.tables, q)
	})
}

func (n *Node) DisableTable(_ context.Context, r *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return n.tableProc("DisableTable", "DisableTableProcedure", r, "ENABLED", "DISABLING", func(d *domain, q string) {
		t := d.tables[q]
		for _, rg := range t.Regions {
			rg.State, rg.Server, rg.ProcId = "CLOSED", "", 0
		}
		t.State = "DISABLED"
	})
}

func (n *Node) EnableTable(_ context.Context, r *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return n.tableProc("EnableTable", "EnableTableProcedure", r, "DISABLED", "ENABLING", func(d *domain, q string) {
		t := d.tables[q]
		for _, rg := range t.Regions {
			d.place(rg, "")
		}
		t.State = "ENABLED"
	})
}

func (n *Node) DescribeTable(_ context.Context, r *adminpb.TableRequest) (*adminpb.Table, error) {
	d, unlock, err := n.begin("DescribeTable", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	q := qualify(r.Namespace, r.Name)
	t := d.tables[q]
	if t == nil {
		return nil, status.Errorf(codes.NotFound, "table %s not found", q)
	}
	return proto.Clone(t).(*adminpb.Table), nil
}

func (n *Node) ListTables(_ context.Context, r *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	d, unlock, err := n.begin("ListTables", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.Namespace != "" && !d.namespaces[r.Namespace] {
		return nil, status.Errorf(codes.NotFound, "namespace %q not found", r.Namespace)
	}
	resp := &adminpb.ListTablesResponse{}
	for _, k := range sortedKeys(d.tables) {
		if t := d.tables[k]; r.Namespace == "" || t.Namespace == r.Namespace {
			resp.Tables = append(resp.Tables, proto.Clone(t).(*adminpb.Table))
		}
	}
	return resp, nil
}

func (n *Node) ListRegions(_ context.Context, r *adminpb.ListRegionsRequest) (*adminpb.ListRegionsResponse, error) {
	d, unlock, err := n.begin("ListRegions", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	regions := d.regions()
	if r.Table != "" {
		q := r.Table
		if !strings.Contains(q, ":") {
			q = qualify("", q)
		}
		t := d.tables[q]
		if t == nil {
			return nil, status.Errorf(codes.NotFound, "table %s not found", q)
		}
		regions = t.Regions
	}
	resp := &adminpb.ListRegionsResponse{}
	for _, rg := range regions {
		resp.Regions = append(resp.Regions, proto.Clone(rg).(*adminpb.Region))
	}
	return resp, nil
}

func (d *domain) region(name string) *adminpb.Region {
	for _, r := range d.regions() {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func (n *Node) MoveRegion(_ context.Context, r *adminpb.MoveRegionRequest) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin("MoveRegion", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	rg := d.region(r.Region)
	if rg == nil {
		return nil, status.Errorf(codes.NotFound, "region %s not found", r.Region)
	}
	if r.ToServer != "" {
		s := d.servers[r.ToServer]
		if s == nil {
			return nil, status.Errorf(codes.NotFound, "region server %s not found", r.ToServer)
		}
		if s.info.LeaseState != "live" {
			return nil, status.Errorf(codes.FailedPrecondition, "region server %s is %s, not live", r.ToServer, s.info.LeaseState)
		}
	}
	if rg.State != "OPEN" {
		return nil, status.Errorf(codes.FailedPrecondition, "region %s is %s, not OPEN", r.Region, rg.State)
	}
	from := rg.Server
	id := c.run("MoveRegionProcedure", r.Nonce, func(id uint64) string {
		rg.State, rg.ProcId = "CLOSING", id
		return ""
	}, func(uint64) string {
		if r.ToServer == "" {
			d.place(rg, from)
			if rg.Server == "" { // nowhere else to go: back where it was
				rg.State, rg.Server = "OPEN", from
				return fmt.Sprintf("no live region server other than %s", from)
			}
			return ""
		}
		rg.State, rg.Server, rg.ProcId = "OPEN", r.ToServer, 0
		return ""
	})
	return c.reply(id)
}

func (n *Node) ListServers(context.Context, *adminpb.ListServersRequest) (*adminpb.ListServersResponse, error) {
	d, unlock, err := n.begin("ListServers", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	resp := &adminpb.ListServersResponse{}
	for _, id := range sortedKeys(d.servers) {
		s := proto.Clone(d.servers[id].info).(*adminpb.Server)
		s.RegionCount = int32(d.count(id))
		resp.Servers = append(resp.Servers, s)
	}
	return resp, nil
}

func (n *Node) ServerRegions(_ context.Context, r *adminpb.ServerRegionsRequest) (*adminpb.ServerRegionsResponse, error) {
	d, unlock, err := n.begin("ServerRegions", "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := d.servers[r.Server]
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "region server %s not found", r.Server)
	}
	resp := &adminpb.ServerRegionsResponse{Server: r.Server, Hosted: slices.Clone(s.hosted)}
	for _, rg := range d.regions() {
		if rg.Server != r.Server {
			continue
		}
		resp.Assigned = append(resp.Assigned, rg.Name)
		if !s.set && rg.State == "OPEN" {
			resp.Hosted = append(resp.Hosted, rg.Name)
		}
	}
	return resp, nil
}

func (n *Node) Balance(_ context.Context, r *adminpb.BalanceRequest) (*adminpb.SubmitProcedureResponse, error) {
	d, unlock, err := n.begin("Balance", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	if id, ok := c.known(r.Nonce); ok {
		return c.reply(id)
	}
	id := c.run("BalanceProcedure", r.Nonce, func(uint64) string { return "" }, func(uint64) string {
		live := d.live()
		if len(live) == 0 {
			return ""
		}
		// Move one region at a time from the fullest live server to the
		// emptiest until their counts differ by at most one.
		for {
			slices.SortStableFunc(live, func(a, b *server) int { return d.count(a.info.Id) - d.count(b.info.Id) })
			lo, hi := live[0].info.Id, live[len(live)-1].info.Id
			if d.count(hi)-d.count(lo) <= 1 {
				return ""
			}
			for _, rg := range d.regions() {
				if rg.Server == hi && rg.State == "OPEN" {
					rg.Server = lo
					break
				}
			}
		}
	})
	return c.reply(id)
}

var lockKinds = []string{"namespace", "table", "region"}

// conflicts reports whether l cannot be granted while other is held.
func conflicts(l, other *lock) bool {
	if l.id == other.id || l.kind != other.kind || !(l.exclusive || other.exclusive) {
		return false
	}
	for _, n := range l.names {
		if slices.Contains(other.names, n) {
			return true
		}
	}
	return false
}

// grant grants, in id order, each waiting lock that no held one conflicts
// with. c.mu is held.
func (d *domain) grant() {
	var ids []uint64
	for id := range d.locks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := d.locks[id]
		if l.state != "WAITING" {
			continue
		}
		free := true
		for _, o := range d.locks {
			if o.state == "ACQUIRED" && conflicts(l, o) {
				free = false
				break
			}
		}
		if free {
			l.state = "ACQUIRED"
		}
	}
}

// expireLocks expires the locks whose lease ran out, granting what they
// blocked. c.mu is held.
func (c *Cluster) expireLocks(d *domain) {
	now := d.lockClock.Now()
	for _, l := range d.locks {
		if (l.state == "WAITING" || l.state == "ACQUIRED") && now.Sub(l.lastBeat) > d.lockTimeout {
			l.state = "EXPIRED"
		}
	}
	d.grant()
}

func (d *domain) lockResponse(l *lock) *adminpb.LockResponse {
	return &adminpb.LockResponse{LockId: l.id, State: l.state, LeaseTimeoutMs: d.lockTimeout.Milliseconds()}
}

func (n *Node) AcquireLock(_ context.Context, r *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error) {
	d, unlock, err := n.begin("AcquireLock", r.Nonce)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := n.c
	c.expireLocks(d)
	if id, ok := c.known("lock/" + r.Nonce); ok && r.Nonce != "" {
		return d.lockResponse(d.locks[id]), nil
	}
	switch {
	case !slices.Contains(lockKinds, r.Kind):
		return nil, status.Errorf(codes.InvalidArgument, "lock kind %q: want namespace, table or region", r.Kind)
	case len(r.Names) == 0:
		return nil, status.Error(codes.InvalidArgument, "a lock needs at least one name")
	case r.Kind != "region" && len(r.Names) != 1:
		return nil, status.Errorf(codes.InvalidArgument, "a %s lock names exactly one %s", r.Kind, r.Kind)
	}
	c.nextID++
	l := &lock{id: c.nextID, kind: r.Kind, names: slices.Clone(r.Names), exclusive: r.Exclusive, state: "WAITING", lastBeat: d.lockClock.Now()}
	d.locks[l.id] = l
	if r.Nonce != "" {
		c.nonces["lock/"+r.Nonce] = l.id
	}
	d.grant()
	return d.lockResponse(l), nil
}

// lockCall looks up lock id for method after expiring what ran out.
func (n *Node) lockCall(method string, id uint64, f func(d *domain, l *lock)) (*adminpb.LockResponse, error) {
	d, unlock, err := n.begin(method, "")
	if err != nil {
		return nil, err
	}
	defer unlock()
	n.c.expireLocks(d)
	l := d.locks[id]
	if l == nil {
		return nil, status.Errorf(codes.NotFound, "lock %d not found", id)
	}
	f(d, l)
	return d.lockResponse(l), nil
}

func (n *Node) LockHeartbeat(_ context.Context, r *adminpb.LockRef) (*adminpb.LockResponse, error) {
	return n.lockCall("LockHeartbeat", r.LockId, func(d *domain, l *lock) {
		if l.state == "WAITING" || l.state == "ACQUIRED" {
			l.lastBeat = d.lockClock.Now()
		}
	})
}

func (n *Node) ReleaseLock(_ context.Context, r *adminpb.LockRef) (*adminpb.LockResponse, error) {
	return n.lockCall("ReleaseLock", r.LockId, func(d *domain, l *lock) {
		if l.state == "WAITING" || l.state == "ACQUIRED" {
			l.state = "RELEASED"
			d.grant()
		}
	})
}
