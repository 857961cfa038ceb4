// Package clustertest runs a real Baton cluster inside one test process:
// N masters (cluster.Node, the domain of cluster/domain and the admin gRPC
// API of cluster/admin, each on loopback) and M region servers
// (cluster/regionserver) registered with them. It is Baton's counterpart of
// hashicorp/raft's exported testing cluster: one harness that every
// package above the domain can test against, instead of a copy per
// package.
//
// # Writing a test
//
//	func TestCreateSurvivesFailover(t *testing.T) {
//		c := clustertest.New(t, clustertest.Config{RegionServers: 3})
//		cl := c.Client()
//		ctx := context.Background()
//		id, err := cl.CreateTable(ctx, "", "t1", 8, "")
//		if err != nil {
//			t.Fatal(err)
//		}
//		li, _ := c.WaitLeader()
//		c.Kill(li)   // the client follows the new leader
//		p, err := cl.Wait(ctx, id)
//		...
//		c.WaitFor("every region open", func() bool { ... })
//	}
//
// New starts the masters, waits for a leader whose executor and leader
// services run, then starts the region servers and waits for each one's
// registration. Everything is stopped by t.Cleanup in reverse order; a
// test never closes the cluster itself.
//
// # Faults
//
//   - Partition(i...) cuts the listed masters' Raft traffic from the other
//     masters (raft's in-memory transport); Heal(i...) restores it. The
//     admin API and the region servers' traffic stay reachable, as when a
//     master's peer links fail but clients still reach it.
//   - Pause(i, d) stops master i's Raft traffic for d and then restores it:
//     what a stalled process (a long GC, SIGSTOP, a VM migration) looks
//     like to its peers. Its own timers keep running, so a paused leader
//     steps down after its lease timeout, as a leader cut off would.
//   - Kill(i) crashes a master (no leadership transfer, storage left as is);
//     Restart(i) brings it back on the same storage and admin address.
//   - StopRegionServer / StartRegionServer crash and restart region servers
//     under the same id (a new start code).
//   - Faults() is an rpcfault.Injector on every master's gRPC server (the
//     admin API and the Master service region servers call) and on the
//     dispatchers' calls to region servers; add rules to lose, delay or
//     repeat single messages.
//
// With Config.HTTP each master also serves its HTTP endpoints (/status,
// /readyz, /metrics) and the web console (cluster/console) on a loopback
// address of its own, Master.HTTPAddr, kept across restarts.
//
// With Config.TCP the masters use raft's TCP transport on loopback and the
// real bolt and file stores, as the baton binary does; Partition and Pause
// are then unavailable.
//
// # Waiting
//
// Tests wait for conditions, never for time: WaitLeader, WaitFor (built on
// internal/testwait), Wait and MustSucceed for procedures. Deadlines are
// generous (Config.WaitTimeout) because a passing run returns as soon as
// the condition holds; only a failure takes that long.
//
// # Metrics and traces
//
// Each master has a Prometheus registry of its own, kept across restarts
// (Master.Metrics; Master.HTTPHandler serves it at /metrics as the binary
// does), with raft's metrics installed; each region server has its own
// (regionserver.Server.Metrics, HTTPHandler). Config.TracerProvider traces
// every master and region server: give it an SDK provider with an
// in-memory exporter (tracetest.SpanRecorder) to assert on the spans.
//
// # Logs
//
// Each master, region server and the fault injector log to a buffer of
// their own; the buffers' tails are printed when the test failed (unless
// BATON_TEST_LOG is set: then they also log to stderr as they go, at that
// level, or debug for anything that is not a level name).
package clustertest
