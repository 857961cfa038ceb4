package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{fmt.Errorf("x: %w", procedure.ErrInvalid), codes.InvalidArgument},
		{fmt.Errorf("x: %w", procedure.ErrUnknownType), codes.InvalidArgument},
		{fmt.Errorf("x: %w: 7", procedure.ErrNotFound), codes.NotFound},
		{fmt.Errorf("%w: 7 is already SUCCESS", procedure.ErrNotAllowed), codes.FailedPrecondition},
		{fmt.Errorf("%w: 7 is RUNNABLE", procedure.ErrNotTerminal), codes.FailedPrecondition},
		{&cluster.NotLeaderError{LeaderID: "m1"}, codes.Unavailable},
		{fmt.Errorf("wrapped: %w", &cluster.NotLeaderError{}), codes.Unavailable},
		{cluster.ErrNotReady, codes.Unavailable},
		{cluster.ErrShutdown, codes.Unavailable},
		{raft.ErrNotLeader, codes.Unavailable},
		{raft.ErrLeadershipLost, codes.Unavailable},
		{raft.ErrRaftShutdown, codes.Unavailable},
		{procedure.ErrStopped, codes.Unavailable},
		{procedure.ErrNotStarted, codes.Unavailable},
		{fmt.Errorf("%w: %w", procedure.ErrStoreFailed, raft.ErrNotLeader), codes.Unavailable},
		{fmt.Errorf("%w: %w", procedure.ErrNonceFailed, procedure.ErrInvalid), codes.Unavailable},
		{raftfsm.ErrClosed, codes.Unavailable},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{errors.New("boom"), codes.Internal},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// fakeBackend is a Backend whose leadership the test sets.
type fakeBackend struct {
	mu       sync.Mutex
	id       string
	leaderID string
	procs    Procedures
	procsErr error
	kv       map[string][]byte
	peers    []cluster.PeerStatus
	mem      *store.MemStore // the executor's store: what is committed
	state    string          // raft state Status reports; default Follower
	contact  time.Time       // last contact with the leader; default long ago
}

func (f *fakeBackend) ID() string { return f.id }
func (f *fakeBackend) Leader() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaderID == "" {
		return "", ""
	}
	return f.leaderID, "raft-" + f.leaderID
}
func (f *fakeBackend) IsLeader() bool { id, _ := f.Leader(); return id == f.id }
func (f *fakeBackend) Procedures() (Procedures, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procsErr != nil {
		return nil, f.procsErr
	}
	return f.procs, nil
}
func (f *fakeBackend) Status() cluster.Status {
	id, addr := f.Leader()
	state := f.state
	if state == "" {
		state = "Follower"
	}
	contact := f.contact
	if contact.IsZero() {
		contact = time.Unix(100, 0)
	}
	return cluster.Status{ID: f.id, Address: "raft-" + f.id, State: state, LeaderID: id, LeaderAddr: addr, Term: 3, CommitIndex: 10, AppliedIndex: 9, FSMIndex: 9, Peers: f.peers, LastContact: contact}
}
func (f *fakeBackend) Join(context.Context, string, string, bool) error { return f.notLeader() }
func (f *fakeBackend) RemovePeer(context.Context, string) error         { return f.notLeader() }
func (f *fakeBackend) DomainGet(k string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.kv[k]
	if !ok && k == cluster.ClusterFormatKey {
		// A cluster whose members all run this binary, unless the test
		// commits another cluster version.
		return version.EncodeClusterFormat(version.MaxFormat), true
	}
	return v, ok
}
func (f *fakeBackend) Mutate(_ context.Context, muts []raftfsm.Mutation) error {
	if !f.IsLeader() {
		return f.notLeader()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range muts {
		if m.Op == raftfsm.OpPut {
			f.kv[m.Key] = m.Value
		} else {
			delete(f.kv, m.Key)
		}
	}
	return nil
}
func (f *fakeBackend) LinearizableRead(context.Context) (cluster.ReadInfo, error) {
	if !f.IsLeader() {
		return cluster.ReadInfo{}, f.notLeader()
	}
	ri := f.ReadState()
	ri.Linearizable = true
	return ri, nil
}
func (f *fakeBackend) ReadState() cluster.ReadInfo {
	return cluster.ReadInfo{ServedBy: f.id, AppliedIndex: 9, RaftState: f.Status().State, Term: 3}
}
func (f *fakeBackend) StoredProcedure(id uint64) ([]byte, bool) {
	var data []byte
	f.StoredProceduresAfter(id-1, func(p store.Proc) error {
		if p.ID == id {
			data = p.Data
		}
		return nil
	})
	return data, data != nil
}
func (f *fakeBackend) StoredProceduresAfter(after uint64, fn func(store.Proc) error) error {
	if f.mem == nil {
		return nil
	}
	_, err := f.mem.Load(func(p store.Proc) error {
		if p.ID > after {
			return fn(p)
		}
		return nil
	})
	return err
}
func (f *fakeBackend) notLeader() error {
	id, addr := f.Leader()
	return &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

func newExecutor(t *testing.T) (*procedure.Executor, *store.MemStore) {
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		t.Fatal(err)
	}
	mem := store.NewMemStore()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: mem, Registry: reg, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Stop(context.Background()) })
	return x, mem
}

// TestUnavailable checks the answers of a standby that cannot forward.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	fwd := metadata.NewIncomingContext(ctx, metadata.Pairs(forwardedKey, "m9"))
	for _, tc := range []struct {
		name     string
		leader   string
		kv       map[string][]byte
		procsErr error
		ctx      context.Context
		wantHint *adminpb.LeaderHint
		wantMsg  string
	}{
		{"no leader", "", nil, &cluster.NotLeaderError{}, ctx, &adminpb.LeaderHint{}, "no leader known"},
		{"leader not registered", "m1", nil, &cluster.NotLeaderError{LeaderID: "m1"}, ctx, &adminpb.LeaderHint{LeaderId: "m1"}, "has not registered"},
		{"already forwarded", "m1", map[string][]byte{cluster.AdminAddrKey("m1"): []byte("10.0.0.1:7000")}, &cluster.NotLeaderError{LeaderID: "m1"}, fwd,
			&adminpb.LeaderHint{LeaderId: "m1", LeaderAdminAddress: "10.0.0.1:7000"}, "not forwarding again"},
		{"leader establishing", "m0", nil, cluster.ErrNotReady, ctx, &adminpb.LeaderHint{LeaderId: "m0"}, "not ready"},
		{"registered at own address", "m1", map[string][]byte{cluster.AdminAddrKey("m1"): []byte("self:1")}, &cluster.NotLeaderError{LeaderID: "m1"}, ctx,
			&adminpb.LeaderHint{LeaderId: "m1", LeaderAdminAddress: "self:1"}, "stale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := tc.kv
			if kv == nil {
				kv = map[string][]byte{}
			}
			b := &fakeBackend{id: "m0", leaderID: tc.leader, procsErr: tc.procsErr, kv: kv}
			s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.SubmitProcedure(tc.ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("submit: %v, want UNAVAILABLE", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("message %q does not contain %q", err, tc.wantMsg)
			}
			h, ok := LeaderHintOf(err)
			if !ok {
				t.Fatalf("no LeaderHint in %v", err)
			}
			if h.LeaderId != tc.wantHint.LeaderId || h.LeaderAdminAddress != tc.wantHint.LeaderAdminAddress {
				t.Errorf("hint %v, want %v", h, tc.wantHint)
			}
			// Only a call forwarded here is refused as one this node did
			// nothing of: its sender may send it again.
			if got, want := Unserved(err), tc.ctx == fwd; got != want {
				t.Errorf("marked unserved: %v, want %v", got, want)
			}
			// Validation happens before forwarding.
			if _, err := s.SubmitProcedure(tc.ctx, &adminpb.SubmitProcedureRequest{Type: "nope"}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("unknown type on a standby: %v", err)
			}
		})
	}
}

// TestLocal exercises the leader path on a fake backend with a real
// executor, and the registration loop.
func TestLocal(t *testing.T) {
	x, mem := newExecutor(t)
	b := &fakeBackend{id: "m0", leaderID: "m0", procs: x, kv: map[string][]byte{}, mem: mem}
	s, err := New(b, Config{RegisterInterval: 5 * time.Millisecond, WatchInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("self:1"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	testwait.For(t, 5*time.Second, "self-registration", func() bool {
		v, _ := b.DomainGet(cluster.AdminAddrKey("m0"))
		return string(v) == "self:1"
	})
	ctx := context.Background()
	if _, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", TimeoutMs: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative timeout: %v", err)
	}
	if _, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty type: %v", err)
	}
	if _, err := s.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative page size: %v", err)
	}
	r, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"delay": "1h", "steps": "2"}, TimeoutMs: 50})
	if err != nil {
		t.Fatal(err)
	}
	// The submission timeout aborts it: it rolls back.
	testwait.For(t, 5*time.Second, "timeout rollback", func() bool {
		p, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.Id})
		return err == nil && p.State == "ROLLEDBACK"
	})
	p, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.Id})
	if err != nil || p.WaitingFor != "finished" {
		t.Fatalf("get: %v %v", p, err)
	}
	if _, err := s.AddPeer(ctx, &adminpb.AddPeerRequest{Id: "m5"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("add peer without address: %v", err)
	}
	if _, err := s.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: "m5"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("register without address: %v", err)
	}
	if _, err := s.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: "m5", AdminAddress: "h:5"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := b.DomainGet(cluster.AdminAddrKey("m5")); string(v) != "h:5" {
		t.Fatalf("m5 registered as %q", v)
	}
	// Losing the executor ends readiness.
	if ok, _ := s.Ready(); !ok {
		t.Fatal("not ready as leader")
	}
	b.mu.Lock()
	b.procsErr = cluster.ErrNotReady
	b.mu.Unlock()
	if ok, why := s.Ready(); ok || !strings.Contains(why, "establishing") {
		t.Fatalf("ready %v %q", ok, why)
	}
}

func TestHTTP(t *testing.T) {
	b := &fakeBackend{
		id: "m1", leaderID: "m0", procsErr: &cluster.NotLeaderError{LeaderID: "m0"},
		kv: map[string][]byte{cluster.AdminAddrKey("m0"): []byte("h0:7000"), cluster.AdminAddrKey("m1"): []byte("h1:7000")},
		peers: []cluster.PeerStatus{
			{ID: "m0", Address: "raft-m0", Suffrage: "Voter", Leader: true},
			{ID: "m1", Address: "raft-m1", Suffrage: "Voter"},
		},
	}
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	srv := httptest.NewServer(HTTPHandler(b, reg, WithDebugEndpoints()))
	defer srv.Close()
	// Without WithDebugEndpoints (no --debug-endpoints), /debug/ is not served.
	plain := httptest.NewServer(HTTPHandler(b, reg))
	defer plain.Close()
	get := func(path string) (int, string) {
		t.Helper()
		base := srv.URL
		if p, ok := strings.CutPrefix(path, "plain:"); ok {
			base, path = plain.URL, p
		}
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		body, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(body)
	}

	for _, tc := range []struct {
		name     string
		leader   string
		path     string
		wantCode int
		wantBody string
	}{
		{"ready follower", "m0", "/readyz", 200, "ready: following m0"},
		{"no leader", "", "/readyz", 503, "not ready: no leader known"},
		{"metrics", "m0", "/metrics", 200, "baton_test_total 3"},
		{"pprof index", "m0", "/debug/pprof/", 200, "goroutine"},
		{"pprof goroutine", "m0", "/debug/pprof/goroutine?debug=1", 200, "goroutine profile"},
		{"pprof off by default", "m0", "plain:/debug/pprof/", 404, ""},
		{"domain off by default", "m0", "plain:/debug/domain", 404, ""},
		{"metrics without debug", "m0", "plain:/metrics", 200, "baton_test_total 3"},
		{"unknown path", "m0", "/nope", 404, ""},
		{"status", "m0", "/status", 200, `"leader_admin_address": "h0:7000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.mu.Lock()
			b.leaderID = tc.leader
			b.mu.Unlock()
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("GET %s: %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}

	_, body := get("/status")
	var st StatusJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != "m1" || !st.Ready || st.LeaderID != "m0" || st.AdminAddress != "h1:7000" || st.Term != 3 || st.CommitIndex != 10 ||
		len(st.Peers) != 2 || st.Peers[0].AdminAddress != "h0:7000" || !st.Peers[0].Leader || st.LastContact == nil {
		t.Fatalf("status %+v", st)
	}
	for _, key := range []string{`"fsm_wal_index"`, `"applied_index"`, `"ready_reason"`, `"suffrage"`} {
		if !strings.Contains(body, key) {
			t.Errorf("status lacks %s: %s", key, body)
		}
	}
}
