package admin

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/benchstat"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

// BenchmarkReads compares, through the admin API of a 3-node cluster on
// loopback (raft's TCP transport, raft-boltdb with fsync, as in
// production), concurrent reads at each consistency against a write:
//
//	stale         ListProcedures at STALE, answered by the leader at once
//	linearizable  ListProcedures (default), the leader's batched quorum round
//	forwarded     the same sent to a follower, which forwards it
//	write         AclGrant of read or operate by turns: one raft commit each
//	              (RegisterNode, once used here, is now the masters' own)
//
// BATON_BENCH_READERS (default 16) callers share b.N calls of each kind
// (BATON_BENCH_READ_KINDS, a comma-separated subset, runs only those: to
// profile one path);
// the kinds run in rounds (4, BATON_BENCH_ROUNDS another even count),
// every other one in reverse order, so that load from elsewhere on the
// machine hits them alike. Reported: calls/s of each, and each over stale
// (goal: linearizable/stale >= 0.8, forwarded/stale >= 0.5 at 16
// readers), from the sums of all rounds and as the median of each
// round's own ratio with the least and greatest (<kind>/stale-median,
// -min, -max): a moment of the machine moves one round, not the median.
//
//	go test -run xxx -bench BenchmarkReads -benchtime 20000x ./cluster/admin/
func BenchmarkReads(b *testing.B) {
	readers := 16
	if v, err := strconv.Atoi(os.Getenv("BATON_BENCH_READERS")); err == nil && v > 0 {
		readers = v
	}
	nodes := startTCPCluster(b, 3)
	var leader, follower *testNode
	testwait.For(b, 30*time.Second, "a leader with a running executor and a follower that knows it", func() bool {
		leader, follower = nil, nil
		for _, n := range nodes {
			if _, err := n.node.Executor(); err == nil {
				leader = n
			} else if id, _ := n.node.Leader(); id != "" {
				follower = n
			}
		}
		return leader != nil && follower != nil
	})
	ctx := context.Background()
	// The follower forwards once it knows the leader's admin address.
	testwait.ForNil(b, 30*time.Second, "the follower to forward", func() error {
		_, err := follower.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1})
		return err
	})
	var writes atomic.Int64
	kinds := []struct {
		name string
		call func() error
	}{
		{"stale", func() error {
			_, err := leader.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1, Consistency: adminpb.Consistency_STALE})
			return err
		}},
		{"linearizable", func() error {
			_, err := leader.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1})
			return err
		}},
		{"forwarded", func() error {
			_, err := follower.cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1})
			return err
		}},
		{"write", func() error {
			perm := [2]string{"read", "operate"}[writes.Add(1)%2]
			_, err := leader.cl.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "bench", Permission: perm})
			return err
		}},
	}
	if only := os.Getenv("BATON_BENCH_READ_KINDS"); only != "" {
		kinds = slices.DeleteFunc(kinds, func(k struct {
			name string
			call func() error
		}) bool {
			return !slices.Contains(strings.Split(only, ","), k.name)
		})
	}
	elapsed := make([]time.Duration, len(kinds))
	cpu := make([]time.Duration, len(kinds))
	done := make([]int, len(kinds))
	// Warm every path first (the leader's client connects on its first
	// call): the first round's first kind would pay for it.
	for _, kind := range kinds {
		for range readers {
			if err := kind.call(); err != nil {
				b.Fatalf("%s, warming: %v", kind.name, err)
			}
		}
	}
	rounds := 4
	if v, err := strconv.Atoi(os.Getenv("BATON_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v + v%2 // even: each order as often
	}
	b.ResetTimer()
	// The kinds take turns, every other round backwards: what a round
	// leaves behind is paid by the kind after it.
	took, err := benchstat.Alternate(len(kinds), rounds, func(k, r int) (time.Duration, error) {
		kind, n := kinds[k], benchstat.Split(b.N, rounds, r)
		var next atomic.Int64
		var wg sync.WaitGroup
		var firstErr atomic.Value
		start, cpu0 := time.Now(), processCPU()
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if err := kind.call(); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		elapsed[k] += d
		cpu[k] += processCPU() - cpu0
		done[k] += n
		if err, _ := firstErr.Load().(error); err != nil {
			return 0, fmt.Errorf("%s: %w", kind.name, err)
		}
		if n == 0 {
			return 0, nil // the framework's b.N=1 probe leaves rounds of none, which say nothing
		}
		return d, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	// perRound[k] is kind k's rate over stale's in each round that made
	// calls.
	perRound := make([][]float64, len(kinds))
	if len(kinds) > 0 && kinds[0].name == "stale" {
		copy(perRound, benchstat.RatiosByRound(took, 0))
	}
	b.StopTimer()
	if rounds, reads := leader.node.ReadRounds(); rounds > 0 {
		b.ReportMetric(float64(reads)/float64(rounds), "reads/round")
	}
	if f := &follower.srv.bulk; f.calls.Load() > 0 {
		b.ReportMetric(float64(f.inBulk.Load())/float64(f.calls.Load()), "forwarded/call")
	}
	rate := make([]float64, len(kinds))
	for k, kind := range kinds {
		rate[k] = float64(done[k]) / elapsed[k].Seconds()
		b.ReportMetric(rate[k], kind.name+"/s")
	}
	if len(kinds) > 0 && kinds[0].name == "stale" {
		for k, kind := range kinds[1:] {
			b.ReportMetric(rate[k+1]/rate[0], kind.name+"/stale")
			benchstat.Summarize(perRound[k+1]).Report(b, kind.name+"/stale")
		}
	}
	// The CPU of the whole process (three masters and the callers) per
	// call: on a machine shared with other work the rates move with the
	// neighbours, this much less; a CPU-bound reader's ratio to stale is
	// near stale's CPU over its own.
	line := fmt.Sprintf("%d callers:", readers)
	for k, kind := range kinds {
		b.ReportMetric(float64(cpu[k].Microseconds())/float64(max(done[k], 1)), kind.name+"-cpu-us/call")
		line += fmt.Sprintf(" %s %.0f/s", kind.name, rate[k])
		if k > 0 && kinds[0].name == "stale" {
			sum := benchstat.Summarize(perRound[k])
			line += fmt.Sprintf(" (%.2fx; by round: median %.2fx, %.2f to %.2f over %d)", rate[k]/rate[0], sum.Median, sum.Min, sum.Max, sum.N)
		}
	}
	b.Log(line)
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startTCPCluster starts n nodes with production stores and raft's TCP
// transport on loopback, each with an admin server.
func startTCPCluster(b *testing.B, n int) []*testNode { return startTCPClusterWith(b, n, nil) }

// startTCPClusterWith is startTCPCluster with each admin server's
// Config.Access a copy of access (nil: none).
func startTCPClusterWith(b *testing.B, n int, access *Access) []*testNode {
	b.Helper()
	var peers []cluster.Peer
	var cfgs []cluster.Config
	for i := range n {
		id := fmt.Sprintf("b%d", i)
		reg := procedure.NewRegistry()
		if err := diag.Register(reg); err != nil {
			b.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		c := cluster.DefaultConfig()
		c.ID = id
		c.DataDir = b.TempDir()
		c.RaftAddr = addr
		c.SnapshotInterval = time.Hour
		c.Registry = reg
		c.WAL = store.WALConfig{}
		c.Logger = hclog.NewNullLogger()
		peers = append(peers, cluster.Peer{ID: id, Address: addr})
		cfgs = append(cfgs, c)
	}
	var out []*testNode
	for i := range cfgs {
		cfgs[i].Peers = peers
		node, err := cluster.NewNode(cfgs[i])
		if err != nil {
			b.Fatal(err)
		}
		acfg := Config{RegisterInterval: 20 * time.Millisecond}
		if access != nil {
			a := *access
			acfg.Access = &a
		}
		srv, err := NewForNode(node, acfg)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, serveNode(b, node, srv, grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
	return out
}
