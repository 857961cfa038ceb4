package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

type testNode struct {
	node *cluster.Node
	srv  *Server
	addr string
	cc   *grpc.ClientConn
	cl   adminpb.AdminClient
}

// startCluster starts n nodes on raft's in-memory transport, each with an
// admin server on 127.0.0.1:0.
func startCluster(t *testing.T, n int) []*testNode { return startClusterWith(t, n, nil) }

// nodeSetup adjusts node i's admin config and returns the dial option of
// the test's own connection to it (nil: plaintext).
type nodeSetup func(i int, id string, cfg *Config) grpc.DialOption

// startClusterWith is startCluster with each admin server's config
// adjusted by setup (if not nil).
func startClusterWith(t *testing.T, n int, setup nodeSetup) []*testNode {
	t.Helper()
	return startClusterTimed(t, n, 50*time.Millisecond, setup)
}

// steadyRaftTimeout is clustertest.SteadyRaftTimeout, which this
// package's own tests cannot import (clustertest imports admin).
const steadyRaftTimeout = 500 * time.Millisecond

// startClusterTimed is startClusterWith with raft's heartbeat, election
// and leader lease timeouts at raftTimeout: steadyRaftTimeout for a
// test that names the leader and a standby and walks through them,
// which a leadership change on a loaded machine would fail for no fault
// of the code under test.
func startClusterTimed(t *testing.T, n int, raftTimeout time.Duration, setup nodeSetup) []*testNode {
	t.Helper()
	return startClusterOn(t, n, raftTimeout, setup, func(_ int, n *cluster.Node) Backend { return NodeBackend(n) })
}

// startClusterOn is startClusterTimed with node i's admin server on
// backend(i, node): a domain added to it, say.
func startClusterOn(t *testing.T, n int, raftTimeout time.Duration, setup nodeSetup, backend func(i int, n *cluster.Node) Backend) []*testNode {
	t.Helper()
	return startClusterConf(t, n, raftTimeout, setup, backend, nil)
}

// startClusterConf is startClusterOn with node i's cluster config adjusted
// by conf (if not nil): its executor's store wrapped, say.
func startClusterConf(t *testing.T, n int, raftTimeout time.Duration, setup nodeSetup, backend func(i int, n *cluster.Node) Backend, conf func(i int, c *cluster.Config)) []*testNode {
	t.Helper()
	lvl := hclog.Off
	if os.Getenv("BATON_TEST_LOG") != "" {
		lvl = hclog.Debug
	}
	var peers []cluster.Peer
	var cfgs []cluster.Config
	var trans []*raft.InmemTransport
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		reg := procedure.NewRegistry()
		if err := diag.Register(reg); err != nil {
			t.Fatal(err)
		}
		c := cluster.DefaultConfig()
		c.ID = id
		c.DataDir = t.TempDir()
		c.HeartbeatTimeout = raftTimeout
		c.ElectionTimeout = raftTimeout
		c.LeaderLeaseTimeout = raftTimeout
		c.CommitTimeout = 5 * time.Millisecond
		c.SnapshotInterval = time.Hour
		c.HealthInterval = 50 * time.Millisecond
		c.BarrierTimeout = 5 * time.Second
		c.Registry = reg
		c.Workers = 4
		c.WAL = store.WALConfig{NoSync: true}
		c.RaftNoSync = true
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: lvl, Output: os.Stderr})
		addr, tr := raft.NewInmemTransport("")
		c.Transport = tr
		ls := raft.NewInmemStore()
		c.LogStore, c.StableStore = ls, ls
		c.SnapshotStore = raft.NewInmemSnapshotStore()
		peers = append(peers, cluster.Peer{ID: id, Address: string(addr)})
		cfgs = append(cfgs, c)
		trans = append(trans, tr)
	}
	testnet.NewMesh(trans...)
	var nodes []*testNode
	for i := range cfgs {
		cfgs[i].Peers = peers
		if conf != nil {
			conf(i, &cfgs[i])
		}
		node, err := cluster.NewNode(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		acfg := Config{RegisterInterval: 20 * time.Millisecond, Logger: cfgs[i].Logger}
		dial := grpc.WithTransportCredentials(insecure.NewCredentials())
		if setup != nil {
			if d := setup(i, cfgs[i].ID, &acfg); d != nil {
				dial = d
			}
		}
		srv, err := New(backend(i, node), acfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, serveNode(t, node, srv, dial))
	}
	return nodes
}

// serveNode serves srv, node's admin server, on 127.0.0.1:0 and dials it
// with dial; the test's cleanup closes the connection, stops the server
// and kills the node.
func serveNode(tb testing.TB, node *cluster.Node, srv *Server, dial grpc.DialOption) *testNode {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), dial)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cc.Close()
		srv.Stop(ctx)
		node.Kill()
	})
	return &testNode{node: node, srv: srv, addr: lis.Addr().String(), cc: cc, cl: adminpb.NewAdminClient(cc)}
}

// converged waits until one node leads with an executor and every node
// knows every admin address; it returns the leader's index.
func converged(t *testing.T, nodes []*testNode) int {
	t.Helper()
	leader := -1
	testwait.For(t, 15*time.Second, "a ready leader, every admin address registered everywhere and the cluster version raised", func() bool {
		leader = -1
		for i, n := range nodes {
			if _, err := n.node.Executor(); err == nil {
				leader = i
			}
		}
		if leader < 0 {
			return false
		}
		for _, n := range nodes {
			for _, m := range nodes {
				if v, _ := n.node.FSM().Get(cluster.AdminAddrKey(m.node.ID())); string(v) != m.addr {
					return false
				}
			}
			// Its members all run this binary: the tests start where an
			// upgraded cluster runs, writing what its version allows.
			if n.node.ClusterFormat() != version.MaxFormat {
				return false
			}
		}
		return true
	})
	return leader
}

func TestClusterAdmin(t *testing.T) {
	nodes := startCluster(t, 3)
	li := converged(t, nodes)
	leader := nodes[li]
	standby := nodes[(li+1)%len(nodes)]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("health", func(t *testing.T) {
		for _, n := range nodes {
			testwait.For(t, 5*time.Second, "SERVING", func() bool {
				r, err := healthpb.NewHealthClient(n.cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "baton.admin.v1.Admin"})
				return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
			})
		}
	})

	t.Run("status", func(t *testing.T) {
		for _, n := range nodes {
			st, err := n.cl.ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if st.LeaderId != leader.node.ID() || st.LeaderAdminAddress != leader.addr {
				t.Errorf("%s: leader %q at %q, want %q at %q", n.node.ID(), st.LeaderId, st.LeaderAdminAddress, leader.node.ID(), leader.addr)
			}
			if len(st.Peers) != 3 {
				t.Fatalf("%s: %d peers", n.node.ID(), len(st.Peers))
			}
			for _, p := range st.Peers {
				if p.AdminAddress == "" || p.Suffrage != "Voter" || p.Leader != (p.Id == leader.node.ID()) {
					t.Errorf("%s: peer %+v", n.node.ID(), p)
				}
			}
		}
	})

	var id uint64
	t.Run("submit via standby and watch", func(t *testing.T) {
		req := &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "3", "delay": "20ms"}, Nonce: "n-1", Owner: "test"}
		r, err := standby.cl.SubmitProcedure(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id = r.Id
		// A retry with the same nonce, through another node, gets the same id.
		for _, n := range nodes {
			r2, err := n.cl.SubmitProcedure(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if r2.Id != id {
				t.Fatalf("nonce retry via %s: id %d, want %d", n.node.ID(), r2.Id, id)
			}
		}
		seen := watchAll(t, ctx, standby.cl, id)
		if len(seen) < 2 {
			t.Errorf("watch sent %d updates, want the initial state and the changes", len(seen))
		}
		last := seen[len(seen)-1]
		if last.State != "SUCCESS" || string(last.Result) != "slept 3 steps" || last.Id != id || last.Type != "sleep" {
			t.Fatalf("last update %v", last)
		}
		if last.Nonce != "n-1" || last.Owner != "test" || last.FinishedUnixMs == 0 {
			t.Errorf("last update %v", last)
		}
	})

	t.Run("get and list via standby", func(t *testing.T) {
		p, err := standby.cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id})
		if err != nil || p.State != "SUCCESS" {
			t.Fatalf("get: %v %v", p, err)
		}
		for range 4 {
			if _, err := leader.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
				t.Fatal(err)
			}
		}
		var all []uint64
		tok := ""
		pages := 0
		for {
			r, err := standby.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{Type: "sleep", PageSize: 2, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, p := range r.Procedures {
				all = append(all, p.Id)
			}
			if r.NextPageToken == "" {
				break
			}
			tok = r.NextPageToken
		}
		if len(all) != 5 || pages < 3 {
			t.Fatalf("listed %v in %d pages", all, pages)
		}
		for i := 1; i < len(all); i++ {
			if all[i] <= all[i-1] {
				t.Fatalf("not ascending: %v", all)
			}
		}
		r, err := leader.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{State: "rolledback"})
		if err != nil || len(r.Procedures) != 0 {
			t.Fatalf("list rolledback: %v %v", r, err)
		}
	})

	codeOf := func(err error) codes.Code { return status.Code(err) }
	for _, tc := range []struct {
		name string
		call func(c adminpb.AdminClient) error
		want codes.Code
	}{
		{"abort finished", func(c adminpb.AdminClient) error { return errOf(c.AbortProcedure(ctx, &adminpb.ProcedureRef{Id: id})) }, codes.FailedPrecondition},
		{"get unknown id", func(c adminpb.AdminClient) error {
			return errOf(c.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 999999}))
		}, codes.NotFound},
		{"abort unknown id", func(c adminpb.AdminClient) error {
			return errOf(c.AbortProcedure(ctx, &adminpb.ProcedureRef{Id: 999999}))
		}, codes.NotFound},
		{"watch unknown id", func(c adminpb.AdminClient) error {
			ws, err := c.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: 999999})
			if err != nil {
				return err
			}
			_, err = ws.Recv()
			return err
		}, codes.NotFound},
		{"unknown type", func(c adminpb.AdminClient) error {
			return errOf(c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "nope"}))
		}, codes.InvalidArgument},
		{"bad argument", func(c adminpb.AdminClient) error {
			return errOf(c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "fail", Arguments: map[string]string{"steps": "2", "fail_at": "2"}}))
		}, codes.InvalidArgument},
		{"bad list state", func(c adminpb.AdminClient) error {
			return errOf(c.ListProcedures(ctx, &adminpb.ListProceduresRequest{State: "DONE"}))
		}, codes.InvalidArgument},
		{"bad page token", func(c adminpb.AdminClient) error {
			return errOf(c.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageToken: "x"}))
		}, codes.InvalidArgument},
		{"ack of running", func(c adminpb.AdminClient) error {
			r, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1", "delay": "1h"}})
			if err != nil {
				return err
			}
			_, err = c.AckResult(ctx, &adminpb.ProcedureRef{Id: r.Id})
			return err
		}, codes.FailedPrecondition},
	} {
		for _, n := range []*testNode{leader, standby} {
			t.Run(tc.name+" via "+n.node.ID(), func(t *testing.T) {
				if got := codeOf(tc.call(n.cl)); got != tc.want {
					t.Fatalf("code %v, want %v", got, tc.want)
				}
			})
		}
	}

	t.Run("fail rolls back; pause, resume, abort", func(t *testing.T) {
		r, err := standby.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "fail", Arguments: map[string]string{"steps": "3", "fail_at": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, standby.cl, r.Id, "ROLLEDBACK")
		r, err = standby.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1000", "delay": "10ms"}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := standby.cl.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: r.Id})
		if err != nil || !p.Paused {
			t.Fatalf("pause: %v %v", p, err)
		}
		p, err = standby.cl.ResumeProcedure(ctx, &adminpb.ProcedureRef{Id: r.Id})
		if err != nil || p.Paused {
			t.Fatalf("resume: %v %v", p, err)
		}
		p, err = standby.cl.AbortProcedure(ctx, &adminpb.ProcedureRef{Id: r.Id})
		if err != nil || !p.AbortRequested {
			t.Fatalf("abort: %v %v", p, err)
		}
		p = waitState(t, ctx, standby.cl, r.Id, "ROLLEDBACK")
		if _, err := standby.cl.AckResult(ctx, &adminpb.ProcedureRef{Id: r.Id}); err != nil {
			t.Fatalf("ack: %v", err)
		}
	})

	t.Run("fanout", func(t *testing.T) {
		r, err := standby.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "fanout", Arguments: map[string]string{"children": "4", "steps": "2", "delay": "5ms"}})
		if err != nil {
			t.Fatal(err)
		}
		p := waitState(t, ctx, leader.cl, r.Id, "SUCCESS")
		if len(p.Children) != 4 || string(p.Result) != "4 children done" {
			t.Fatalf("fanout: %v", p)
		}
	})
}

// errOf is the error of a unary call, its answer dropped.
func errOf[R any](_ R, err error) error { return err }

// watchAll is every update WatchProcedure sends of procedure id, up to
// the end of the stream, for the test to judge them or the last.
func watchAll(t *testing.T, ctx context.Context, c adminpb.AdminClient, id uint64) []*adminpb.Procedure {
	t.Helper()
	ws, err := c.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var seen []*adminpb.Procedure
	for {
		p, err := ws.Recv()
		if errors.Is(err, io.EOF) {
			return seen
		}
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p)
	}
}

func waitState(t *testing.T, ctx context.Context, c adminpb.AdminClient, id uint64, want string) *adminpb.Procedure {
	t.Helper()
	var last *adminpb.Procedure
	if seen := watchAll(t, ctx, c, id); len(seen) > 0 {
		last = seen[len(seen)-1]
	}
	if last == nil || last.State != want {
		t.Fatalf("procedure %d ended %v, want %s", id, last, want)
	}
	return last
}

// TestFailover checks that after the leader dies, a standby forwards to the
// new leader once it has registered.
func TestFailover(t *testing.T) {
	nodes := startCluster(t, 3)
	li := converged(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := nodes[(li+1)%3].cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "20", "delay": "20ms"}, Nonce: "f"})
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithTimeout(ctx, 2*time.Second)
	nodes[li].srv.Stop(kctx)
	kcancel()
	nodes[li].node.Kill()
	rest := []*testNode{nodes[(li+1)%3], nodes[(li+2)%3]}
	// Clients retry UNAVAILABLE; so does this loop.
	var p *adminpb.Procedure
	testwait.For(t, 20*time.Second, "the procedure to finish under the new leader", func() bool {
		p, err = rest[0].cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.Id})
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("get: %v", err)
			}
			return false
		}
		return p.State == "SUCCESS"
	})
	r2, err := rest[1].cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "20", "delay": "20ms"}, Nonce: "f"})
	if err != nil || r2.Id != r.Id {
		t.Fatalf("nonce retry after failover: %v %v, want id %d", r2, err, r.Id)
	}
}
