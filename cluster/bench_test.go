package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// BenchmarkStepCommit measures step-commit throughput of the replicated
// framework on a 3-node loopback cluster against bare hashicorp/raft, at
// 1, 16, 64 and 256 concurrent procedures (BATON_BENCH_PROCS=a,b,... for
// others).
//
// framework: on the leader's executor, b.N steps run as 10-step no-op
// procedures, procs of them in flight at a time; every step is one
// procedure transition committed through the RaftStore (group commit →
// raft → each node's FSM and local WAL). Reported: steps/s, and
// transitions/s, every store write (the steps plus each procedure's
// insert) per second.
//
// bare: an identical 3-node cluster (raft-boltdb log and stable store
// behind the same LogCache, file snapshots, TCP transport on 127.0.0.1,
// the raft.Config built from the same Config) running a no-op FSM; procs
// goroutines share b.N raft.Apply calls, each of one transition's command
// (a PROC_BATCH entry carrying one 10-step procedure's image). Reported:
// applies/s.
//
// Group commit near its limit: on the leader, steps/fsync is the steps
// committed per write of raft's log (each leader dispatch of new entries is
// one log store transaction, one fsync; counted through raft's own
// go-metrics key raft.leader.dispatchLog), of-procs is steps/fsync over
// the procedures in flight (goal ≥ 0.75 up to 64: every log write carries
// a step of most of them; the ceiling is 10/11, since a procedure's insert
// is one of its 11 writes and a client has one write pending at a time),
// and p99-step-ms is the 99th percentile of the time from one step of a
// procedure starting to its next step starting (the step's commit through
// raft in between).
//
// framework/bare is transitions/s over applies/s (goal ≥ 0.8). The two are
// measured in alternating rounds (up to 4, each a share of b.N), so that
// load from elsewhere on the machine hits both alike; ns/op is the
// framework's time per step. Both clusters are built once, with fsync on
// (the production default); BATON_BENCH_NOSYNC=1 turns it off in the bolt
// stores and the FSM's WAL alike. See benchTuning for tuning knobs.
//
//	go test -run xxx -bench BenchmarkStepCommit -benchtime 2000x ./cluster/
func BenchmarkStepCommit(b *testing.B) {
	noSync := os.Getenv("BATON_BENCH_NOSYNC") != ""
	fw := newBenchFramework(b, noSync)
	bare := newBenchBareCluster(b, noSync)
	payload := fw.transitionPayload(b)
	b.Logf("payload %d bytes, fsync %v", len(payload), !noSync)

	for _, procs := range benchProcCounts() {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			// Rounds of at least two waves of procedures each.
			rounds := max(1, min(4, b.N/(2*benchProcSteps*procs)))
			var fwTime, bareTime time.Duration
			var steps, writes, entries, applies, fsyncs, steadySteps, steadyFsyncs uint64
			var lat []time.Duration
			b.ResetTimer()
			b.StopTimer()
			for r := range rounds {
				n := b.N / rounds
				if r == rounds-1 {
					n = b.N - r*(b.N/rounds)
				}
				b.StartTimer()
				res := fw.run(b, procs, n)
				b.StopTimer()
				fwTime += res.d
				steps += res.steps
				writes += res.writes
				entries += res.entries
				fsyncs += res.fsyncs
				steadySteps += res.steadySteps
				steadyFsyncs += res.steadyFsyncs
				lat = append(lat, res.latencies...)
				bareTime += bare.run(b, procs, n, payload)
				applies += uint64(n)
			}
			fwRate := float64(writes) / fwTime.Seconds()
			bareRate := float64(applies) / bareTime.Seconds()
			b.ReportMetric(float64(steps)/fwTime.Seconds(), "steps/s")
			b.ReportMetric(fwRate, "transitions/s")
			if entries > 0 {
				b.ReportMetric(float64(writes)/float64(entries), "writes/entry")
			}
			switch {
			case steadyFsyncs > 0:
				perFsync := float64(steadySteps) / float64(steadyFsyncs)
				b.ReportMetric(perFsync, "steps/fsync")
				b.ReportMetric(perFsync/float64(procs), "of-procs")
			case fsyncs > 0:
				if b.N > 1 {
					b.Logf("procs=%d: no steady state (every goroutine needs 2 procedures: -benchtime %dx or more); steps/fsync over the whole run, ramp and tail included", procs, 2*benchProcSteps*procs*rounds)
				}
				b.ReportMetric(float64(steps)/float64(fsyncs), "steps/fsync")
			}
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-step-ms")
			}
			b.ReportMetric(bareRate, "applies/s")
			b.ReportMetric(fwRate/bareRate, "framework/bare")
		})
	}
}

// benchProcCounts is 1, 16, 64, 256, or the comma list in BATON_BENCH_PROCS.
func benchProcCounts() []int {
	s := os.Getenv("BATON_BENCH_PROCS")
	if s == "" {
		return []int{1, 16, 64, 256}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// benchStepProc is a procedure of Steps no-op steps.
type benchStepProc struct {
	procedure.Base
	Steps, Done int

	// last is when its previous step started; each step records the time
	// since, into lat (not persisted: the executor keeps the procedure).
	last time.Time
	lat  *benchLatencies
}

// benchLatencies collects step-to-step times.
type benchLatencies struct {
	steps atomic.Uint64 // steps started
	mu    sync.Mutex
	d     []time.Duration
}

func (l *benchLatencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (p *benchStepProc) Execute(*procedure.Context) (procedure.Step, error) {
	now := time.Now()
	if p.lat != nil {
		p.lat.steps.Add(1)
		if !p.last.IsZero() {
			p.lat.add(now.Sub(p.last))
		}
	}
	p.last = now
	p.Done++
	if p.Done >= p.Steps {
		return procedure.Done(), nil
	}
	return procedure.More(), nil
}

func (p *benchStepProc) Rollback(*procedure.Context) error { return nil }

// benchNodeConfig is the production configuration (DefaultConfig) of one
// benchmark node; the bare-raft cluster derives its raft.Config from it too.
func benchNodeConfig(b *testing.B, id string, noSync bool) Config {
	c := DefaultConfig()
	c.ID = id
	c.DataDir = b.TempDir()
	c.RaftAddr = testnet.FreeAddr(b)
	c.RaftNoSync = noSync
	c.WAL = store.WALConfig{NoSync: noSync}
	c.Workers = slices.Max(benchProcCounts()) // a worker for every procedure at the highest concurrency
	reg := procedure.NewRegistry()
	reg.MustRegister("bench.steps", 1, func() procedure.Procedure { return &benchStepProc{} })
	c.Registry = reg
	benchTuning(b, &c)
	return c
}

// benchTuning applies tuning experiments from the environment, so that
// settings can be compared without editing defaults:
// BATON_BENCH_MAX_APPEND (MaxAppendEntries), BATON_BENCH_BATCH_APPLY=0
// (BatchApplyCh off), BATON_BENCH_MAX_BATCH (RaftStore MaxBatchWrites),
// BATON_BENCH_IN_FLIGHT (RaftStore MaxInFlight), BATON_BENCH_LINGER
// (RaftStore MaxLinger, a Go duration; -1ns: none), BATON_BENCH_WAL_NOSYNC=1
// (the FSM's local WAL without fsync; framework only), BATON_BENCH_TRACING=1
// (every procedure and step traced, to an exporter that drops the spans:
// compare steps/s with a run without it).
func benchTuning(b *testing.B, c *Config) {
	atoi := func(name string) int {
		v := os.Getenv(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("%s=%q: %v", name, v, err)
		}
		return n
	}
	if n := atoi("BATON_BENCH_MAX_APPEND"); n > 0 {
		c.MaxAppendEntries = n
	}
	if os.Getenv("BATON_BENCH_BATCH_APPLY") == "0" {
		c.BatchApplyCh = false
	}
	c.Store.MaxBatchWrites = atoi("BATON_BENCH_MAX_BATCH")
	c.Store.MaxInFlight = atoi("BATON_BENCH_IN_FLIGHT")
	if v := os.Getenv("BATON_BENCH_LINGER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("BATON_BENCH_LINGER=%q: %v", v, err)
		}
		c.Store.MaxLinger = d
	}
	if os.Getenv("BATON_BENCH_WAL_NOSYNC") != "" {
		c.WAL.NoSync = true
	}
	if os.Getenv("BATON_BENCH_TRACING") != "" {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		c.TracerProvider = tp
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

func benchPeers(cfgs []Config) []Peer {
	peers := make([]Peer, len(cfgs))
	for i, c := range cfgs {
		peers[i] = Peer{ID: c.ID, Address: c.RaftAddr}
	}
	return peers
}

// benchFramework is a 3-node cluster of Nodes.
type benchFramework struct {
	nodes []*Node
}

func newBenchFramework(b *testing.B, noSync bool) *benchFramework {
	b.Helper()
	benchInstallDispatchCounter(b)
	var cfgs []Config
	for i := range 3 {
		cfgs = append(cfgs, benchNodeConfig(b, fmt.Sprintf("f%d", i), noSync))
	}
	peers := benchPeers(cfgs)
	f := &benchFramework{}
	b.Cleanup(func() {
		for _, n := range f.nodes {
			n.Kill()
		}
	})
	for _, c := range cfgs {
		c.Peers = peers
		n, err := NewNode(c)
		if err != nil {
			b.Fatal(err)
		}
		f.nodes = append(f.nodes, n)
	}
	return f
}

// leader waits for the leader's running executor and returns its node.
func (f *benchFramework) leader(b *testing.B) (*Node, *procedure.Executor) {
	b.Helper()
	var ln *Node
	var lx *procedure.Executor
	testwait.For(b, 20*time.Second, "a leader with a running executor", func() bool {
		for _, n := range f.nodes {
			if x, err := n.Executor(); err == nil {
				ln, lx = n, x
				return true
			}
		}
		return false
	})
	return ln, lx
}

// transitionPayload runs one procedure and returns the command of its last
// transition: a PROC_BATCH entry with one update of its final image.
func (f *benchFramework) transitionPayload(b *testing.B) []byte {
	n, x := f.leader(b)
	id, err := x.Submit(&benchStepProc{Steps: benchProcSteps}, procedure.SubmitOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := x.Wait(context.Background(), id); err != nil {
		b.Fatal(err)
	}
	img, ok := n.FSM().Proc(id)
	if !ok {
		b.Fatalf("procedure %d not in the FSM", id)
	}
	data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Updates: []store.Proc{{ID: id, Data: img}}})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// benchProcSteps is the length of every benchmark procedure. Fixed, since
// a procedure's image grows with its rollback stack, one entry per step.
const benchProcSteps = 10

type benchResult struct {
	d                              time.Duration
	steps, writes, entries, fsyncs uint64
	latencies                      []time.Duration
	// Of the steady state only (benchWindow): steps started and log
	// fsyncs; zero if there was none.
	steadySteps, steadyFsyncs uint64
}

// benchDispatches counts raft's leader log writes (raft.leader.dispatchLog
// samples) in this process: only a leader writes new entries, and only the
// cluster under measurement has one writing.
var benchDispatches = &benchDispatchSink{}

var benchSinkOnce sync.Once

// benchInstallDispatchCounter makes benchDispatches go-metrics' global
// sink, which is where raft reports.
func benchInstallDispatchCounter(b *testing.B) {
	benchSinkOnce.Do(func() {
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname, conf.EnableRuntimeMetrics, conf.EnableServiceLabel = false, false, false
		if _, err := gometrics.NewGlobal(conf, benchDispatches); err != nil {
			b.Fatal(err)
		}
	})
}

// benchDispatchSink is a go-metrics sink counting raft.leader.dispatchLog.
type benchDispatchSink struct{ n atomic.Uint64 }

func (s *benchDispatchSink) sample(key []string) {
	if len(key) == 3 && key[0] == "raft" && key[1] == "leader" && key[2] == "dispatchLog" {
		s.n.Add(1)
	}
}

func (s *benchDispatchSink) SetGauge([]string, float32)                                 {}
func (s *benchDispatchSink) SetGaugeWithLabels([]string, float32, []gometrics.Label)    {}
func (s *benchDispatchSink) EmitKey([]string, float32)                                  {}
func (s *benchDispatchSink) IncrCounter([]string, float32)                              {}
func (s *benchDispatchSink) IncrCounterWithLabels([]string, float32, []gometrics.Label) {}
func (s *benchDispatchSink) AddSample(key []string, _ float32)                          { s.sample(key) }
func (s *benchDispatchSink) AddSampleWithLabels(key []string, _ float32, _ []gometrics.Label) {
	s.sample(key)
}

// run executes at least n steps as 10-step procedures, procs of them in
// flight at any time (each of procs goroutines submits one and waits for
// it, then the next).
func (f *benchFramework) run(b *testing.B, procs, n int) benchResult {
	node, x := f.leader(b)
	node.mu.Lock()
	rs := node.rstore
	node.mu.Unlock()
	total := int64((n + benchProcSteps - 1) / benchProcSteps)
	var next atomic.Int64
	var wg sync.WaitGroup
	lat := &benchLatencies{}
	// The steady state, where group commit is judged: from every
	// goroutine having finished its first procedure (all procs in flight,
	// past the start's ramp) to the first one finding no more work (the
	// tail, where fewer remain, begins).
	var warmed atomic.Int64
	var steady benchWindow
	st0 := rs.Stats()
	d0 := benchDispatches.n.Load()
	start := time.Now()
	for range procs {
		wg.Go(func() {
			first := true
			for next.Add(1) <= total {
				id, err := x.Submit(&benchStepProc{Steps: benchProcSteps, lat: lat}, procedure.SubmitOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				info, err := x.Wait(context.Background(), id)
				if err != nil || info.State != procedure.Success {
					b.Errorf("procedure %d: %v %v", id, info.State, err)
					return
				}
				if first && warmed.Add(1) == int64(procs) {
					steady.open(lat.steps.Load(), benchDispatches.n.Load())
				}
				first = false
			}
			steady.close(lat.steps.Load(), benchDispatches.n.Load())
		})
	}
	wg.Wait()
	d := time.Since(start)
	st := rs.Stats()
	lat.mu.Lock()
	defer lat.mu.Unlock()
	res := benchResult{d: d, steps: uint64(total * benchProcSteps), writes: st.Writes - st0.Writes, entries: st.Entries - st0.Entries,
		fsyncs: benchDispatches.n.Load() - d0, latencies: lat.d}
	res.steadySteps, res.steadyFsyncs = steady.counts()
	return res
}

// benchWindow records step and fsync counts at the start and the end of
// a benchmark's steady state (each end set once).
type benchWindow struct {
	mu                  sync.Mutex
	opened, closed      bool
	steps0, fsyncs0     uint64
	stepsEnd, fsyncsEnd uint64
}

func (w *benchWindow) open(steps, fsyncs uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.opened && !w.closed {
		w.opened, w.steps0, w.fsyncs0 = true, steps, fsyncs
	}
}

func (w *benchWindow) close(steps, fsyncs uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed, w.stepsEnd, w.fsyncsEnd = true, steps, fsyncs
	}
}

// counts are the steps and fsyncs of the window, zero if it never opened
// (fewer procedures than 2 per goroutine: raise -benchtime).
func (w *benchWindow) counts() (steps, fsyncs uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.opened || !w.closed || w.fsyncsEnd <= w.fsyncs0 {
		return 0, 0
	}
	return w.stepsEnd - w.steps0, w.fsyncsEnd - w.fsyncs0
}

// benchNopFSM accepts every entry and keeps nothing.
type benchNopFSM struct{}

func (benchNopFSM) Apply(*raft.Log) any                 { return nil }
func (benchNopFSM) Snapshot() (raft.FSMSnapshot, error) { return benchNopSnap{}, nil }
func (benchNopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type benchNopSnap struct{}

func (benchNopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (benchNopSnap) Release()                          {}

// benchBareCluster is 3 raft instances built as NewNode builds its own,
// with a no-op FSM.
type benchBareCluster struct {
	rafts []*raft.Raft
}

func newBenchBareCluster(b *testing.B, noSync bool) *benchBareCluster {
	b.Helper()
	var cfgs []Config
	for i := range 3 {
		cfgs = append(cfgs, benchNodeConfig(b, fmt.Sprintf("r%d", i), noSync).withDefaults())
	}
	var conf raft.Configuration
	for _, p := range benchPeers(cfgs) {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: raft.Voter})
	}
	c := &benchBareCluster{}
	var closers []func() error
	b.Cleanup(func() {
		for _, r := range c.rafts {
			r.Shutdown().Error()
		}
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	})
	for _, cfg := range cfgs {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft"), 0o755); err != nil {
			b.Fatal(err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(cfg.DataDir, "raft", "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: time.Second},
			NoSync:      cfg.RaftNoSync,
		})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, bolt.Close)
		logs, err := raft.NewLogCache(512, bolt)
		if err != nil {
			b.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, cfg.Logger)
		if err != nil {
			b.Fatal(err)
		}
		adv, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
		if err != nil {
			b.Fatal(err)
		}
		// The same transport as NewNode's (no pipelining), so that the two
		// clusters stay identical.
		trans, err := raft.NewTCPTransportWithConfig(cfg.RaftAddr, adv, &raft.NetworkTransportConfig{
			MaxPool: cfg.TransportMaxPool, Timeout: cfg.TransportTimeout, Logger: cfg.Logger, MaxRPCsInFlight: 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, trans.Close)
		rc := cfg.raftConfig(make(chan bool, 1))
		if err := raft.BootstrapCluster(rc, logs, bolt, snaps, trans, conf); err != nil {
			b.Fatal(err)
		}
		r, err := raft.NewRaft(rc, benchNopFSM{}, logs, bolt, snaps, trans)
		if err != nil {
			b.Fatal(err)
		}
		c.rafts = append(c.rafts, r)
	}
	return c
}

func (c *benchBareCluster) leader(b *testing.B) *raft.Raft {
	b.Helper()
	var leader *raft.Raft
	testwait.For(b, 20*time.Second, "a bare raft leader", func() bool {
		for _, r := range c.rafts {
			if r.State() == raft.Leader && r.Barrier(5*time.Second).Error() == nil {
				leader = r
				return true
			}
		}
		return false
	})
	return leader
}

// run does n Applies of payload from procs goroutines.
func (c *benchBareCluster) run(b *testing.B, procs, n int, payload []byte) time.Duration {
	r := c.leader(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range procs {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := r.Apply(payload, 10*time.Second).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
