package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// LeaderWork is how the leader spent a phase, each figure against what
// the machine allows (issue 33: set the next goal from physics, not from
// the last figure). A phase across a leader change has no LeaderWork: two
// processes' counters do not add up to one leader's.
type LeaderWork struct {
	Seconds float64 `json:"seconds"`
	// CPUCores is the leader process's CPU time over the phase's wall
	// time; OfMachineCPU that over the machine's cores.
	CPUCores     float64 `json:"cpu_cores"`
	OfMachineCPU float64 `json:"of_machine_cpu"`
	// LogWrites are raft's writes of new entries to the leader's log (one
	// bolt transaction, one fsync each); LogWriteBusy the share of the
	// phase the leader's log writer spent in them.
	LogWrites          float64 `json:"log_writes"`
	LogWritesPerSecond float64 `json:"log_writes_per_second"`
	LogWriteBusy       float64 `json:"log_write_busy"`
	// MachineFsyncsPerSecond is what the row's fsync baseline allows one
	// writer (1 / the median 4 KiB append+fsync); OfMachineFsyncs the
	// leader's log writes per second over it.
	MachineFsyncsPerSecond float64 `json:"machine_fsyncs_per_second"`
	OfMachineFsyncs        float64 `json:"of_machine_fsyncs"`
	// Entries is how far the leader's log grew; Regions the regions the
	// phase opened.
	Entries            uint64  `json:"entries"`
	Regions            int     `json:"regions"`
	EntriesPerRegion   float64 `json:"entries_per_region"`
	RegionsPerLogWrite float64 `json:"regions_per_log_write"`
	// BytesPerRegion is what the leader's local WAL was written per
	// region, its cleanup's copies aside: it holds every procedure and
	// state write the Raft entries carry, so it is the volume the log,
	// the FSM and every follower pay for.
	BytesPerRegion float64 `json:"bytes_per_region"`
	// RewrittenBytesPerRegion is what the local WAL's cleanup copied per
	// region meanwhile (live records of the old segments it merged): left out of
	// BytesPerRegion, it grows with the state already there.
	RewrittenBytesPerRegion float64 `json:"rewritten_bytes_per_region"`
	// ClusterCPUCores is the CPU of every process of the cluster (masters
	// and region servers) over the phase; MachineBusy the share of the
	// machine's cores busy with anything (the cluster, the bench, other
	// jobs), from /proc/stat. ClusterCPUMsPerRegion is the cluster's CPU
	// per region, and MachineRegionsPerSecond what the machine's cores
	// would do at that cost with nothing else running: on one machine
	// running every process, that is the ceiling the open reads against.
	ClusterCPUCores         float64 `json:"cluster_cpu_cores"`
	MachineBusy             float64 `json:"machine_busy"`
	ClusterCPUMsPerRegion   float64 `json:"cluster_cpu_ms_per_region"`
	MachineRegionsPerSecond float64 `json:"machine_regions_per_second"`
	// FollowersCPUCores and RegionServersCPUCores split ClusterCPUCores
	// (the rest is the leader's CPUCores): a cost paid per table or per
	// call shows on the followers (entries to apply, calls forwarded) or
	// the region servers (calls to serve), not only on the leader.
	FollowersCPUCores     float64 `json:"followers_cpu_cores"`
	RegionServersCPUCores float64 `json:"region_servers_cpu_cores"`
	// RegionServerCalls are the leader dispatcher's ExecuteBatch calls
	// (first sends and retries) over the phase, and OpsPerCall the region
	// operations they carried on average: a region server's cost is
	// mostly per call.
	RegionServerCalls float64 `json:"region_server_calls"`
	OpsPerCall        float64 `json:"ops_per_call"`
	// Profile is where the leader's CPU went (--profile): each part's share
	// of the profile's samples, and the cores it used on average.
	Profile []ProfileShare `json:"profile,omitempty"`
	// Allocation is the share of the samples spent allocating
	// (runtime.mallocgc below any part), GC's own marking aside.
	Allocation float64 `json:"allocation,omitempty"`
}

// ProfileShare is one part of the leader's CPU profile; Cores is its CPU
// over the profile's window, which may outlast the phase.
type ProfileShare struct {
	Part  string  `json:"part"`
	Share float64 `json:"share"`
	Cores float64 `json:"cores"`
}

const (
	walBytesMetric   = "baton_wal_written_bytes_total"
	walRewriteMetric = "baton_wal_rewrite_bytes_total"
	cpuMetric        = "process_cpu_seconds_total"
	logWritesMetric  = "baton_raft_leader_dispatch_duration_seconds_count"
	logWriteSecsName = "baton_raft_leader_dispatch_duration_seconds_sum"
	rsCallsMetric    = "baton_dispatch_batch_operations_count"
	rsOpsMetric      = "baton_dispatch_batch_operations_sum"
)

// leaderMetrics are the leader's counters a phase's figures are
// differences of.
var leaderMetrics = []string{cpuMetric, logWritesMetric, logWriteSecsName, walBytesMetric, walRewriteMetric, rsCallsMetric, rsOpsMetric}

// leaderMark is the leader's counters at a phase's start.
type leaderMark struct {
	m       *benchMaster
	at      time.Time
	counts  map[string]float64
	index   uint64
	machine MachineBaseline
	// cpu is the cluster's processes' CPU seconds, busy and total the
	// machine's jiffies (/proc/stat), at the mark.
	cpu         clusterCPU
	busy, total uint64
}

// markLeader reads the leader's counters at the start of a phase.
func markLeader(ctx context.Context, c *benchCluster, machine MachineBaseline) (*leaderMark, error) {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.status(ctx, l)
	if err != nil {
		return nil, err
	}
	counts, err := c.scrapeMetric(ctx, l, leaderMetrics...)
	if err != nil {
		return nil, err
	}
	busy, total := machineJiffies()
	return &leaderMark{m: l, at: time.Now(), counts: counts, index: st.LastIndex, machine: machine, cpu: c.processesCPU(l), busy: busy, total: total}, nil
}

// work is the leader's figures since the mark; nil (and no error) if the
// leader changed meanwhile.
func (k *leaderMark) work(ctx context.Context, c *benchCluster, regions int) (*LeaderWork, error) {
	if k == nil {
		return nil, nil
	}
	secs := time.Since(k.at).Seconds()
	if l := c.leader(ctx); l != k.m {
		return nil, nil
	}
	st, err := c.status(ctx, k.m)
	if err != nil {
		return nil, err
	}
	counts, err := c.scrapeMetric(ctx, k.m, leaderMetrics...)
	if err != nil {
		return nil, err
	}
	w := &LeaderWork{Seconds: secs, Regions: regions}
	w.CPUCores = (counts[cpuMetric] - k.counts[cpuMetric]) / secs
	if k.machine.CPUs > 0 {
		w.OfMachineCPU = w.CPUCores / float64(k.machine.CPUs)
	}
	w.LogWrites = counts[logWritesMetric] - k.counts[logWritesMetric]
	w.LogWritesPerSecond = w.LogWrites / secs
	w.LogWriteBusy = (counts[logWriteSecsName] - k.counts[logWriteSecsName]) / secs
	if k.machine.FsyncMs > 0 {
		w.MachineFsyncsPerSecond = 1000 / k.machine.FsyncMs
		w.OfMachineFsyncs = w.LogWritesPerSecond / w.MachineFsyncsPerSecond
	}
	if st.LastIndex > k.index {
		w.Entries = st.LastIndex - k.index
	}
	if regions > 0 {
		w.EntriesPerRegion = float64(w.Entries) / float64(regions)
	}
	cpu := c.processesCPU(k.m)
	w.ClusterCPUCores = (cpu.total() - k.cpu.total()) / secs
	w.FollowersCPUCores = (cpu.followers - k.cpu.followers) / secs
	w.RegionServersCPUCores = (cpu.regionServers - k.cpu.regionServers) / secs
	w.RegionServerCalls = counts[rsCallsMetric] - k.counts[rsCallsMetric]
	if w.RegionServerCalls > 0 {
		w.OpsPerCall = (counts[rsOpsMetric] - k.counts[rsOpsMetric]) / w.RegionServerCalls
	}
	if busy, total := machineJiffies(); total > k.total {
		w.MachineBusy = float64(busy-k.busy) / float64(total-k.total)
	}
	if regions > 0 {
		w.ClusterCPUMsPerRegion = w.ClusterCPUCores * secs * 1000 / float64(regions)
		if w.ClusterCPUMsPerRegion > 0 && k.machine.CPUs > 0 {
			w.MachineRegionsPerSecond = float64(k.machine.CPUs) * 1000 / w.ClusterCPUMsPerRegion
		}
	}
	if regions > 0 {
		// Less what the WAL's cleanup copied to free its old segments:
		// its own upkeep, which grows with the live state, not what the
		// phase wrote.
		written := counts[walBytesMetric] - k.counts[walBytesMetric]
		rewritten := counts[walRewriteMetric] - k.counts[walRewriteMetric]
		w.BytesPerRegion = max(written-rewritten, 0) / float64(regions)
		w.RewrittenBytesPerRegion = rewritten / float64(regions)
	}
	if w.LogWrites > 0 {
		w.RegionsPerLogWrite = float64(regions) / w.LogWrites
	}
	return w, nil
}

// profileParts sort a sample by the first part, in this order, any of
// whose names is in its stack: the specific before the general, so a
// bolt write under raft's leader loop counts as the log write.
var profileParts = []struct {
	part  string
	names []string
}{
	{"raft: leader log write (bolt, fsync)", []string{"raft.(*Raft).dispatchLogs", ").StoreLogs"}},
	{"raft: apply to the FSM (state, local WAL)", []string{"raft.(*Raft).runFSM"}},
	{"raft: replication to followers", []string{"raft.(*Raft).replicate", "raft.(*NetworkTransport)", "raft.(*netPipeline)", "raft.(*Raft).heartbeat"}},
	{"raft: other (leader loop, commits)", []string{"github.com/hashicorp/raft."}},
	{"executor: encoding records", []string{"procedure.(*Executor).encode"}},
	{"executor: steps (domain logic, spawn, locks)", []string{"procedure.(*Executor)", "baton/scheduler."}},
	{"dispatcher: region server RPCs", []string{"baton/dispatch."}},
	{"local WAL: its writer and cleanup", []string{"baton/store."}},
	{"admin API and region server service (gRPC handlers)", []string{"grpc.(*Server).handleStream", "grpc.(*Server).processUnaryRPC"}},
	{"gRPC and HTTP transport", []string{"google.golang.org/grpc", "golang.org/x/net/http2", "net/http."}},
	{"garbage collection (marking, sweeping)", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart"}},
	{"Go scheduler (idle, parking)", []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.mcall"}},
}

// profileShares reads a CPU profile and shares its samples among
// profileParts ("other" for the rest), largest first, with the share
// spent allocating.
func profileShares(path string) ([]ProfileShare, float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, 0, fmt.Errorf("profile %s: %w", path, err)
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, 0, fmt.Errorf("profile %s: no cpu samples", path)
	}
	byPart := map[string]int64{}
	var total, alloc int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		var names []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function != nil {
					names = append(names, ln.Function.Name)
				}
			}
		}
		part := "other"
	find:
		for _, pp := range profileParts {
			for _, want := range pp.names {
				for _, n := range names {
					if strings.Contains(n, want) {
						part = pp.part
						break find
					}
				}
			}
		}
		byPart[part] += v
		for _, n := range names {
			if n == "runtime.mallocgc" {
				alloc += v
				break
			}
		}
	}
	if total == 0 {
		return nil, 0, nil
	}
	wall := float64(p.DurationNanos)
	var out []ProfileShare
	for part, v := range byPart {
		sh := ProfileShare{Part: part, Share: float64(v) / float64(total)}
		if wall > 0 {
			sh.Cores = float64(v) / wall
		}
		out = append(out, sh)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Share > out[j].Share })
	return out, float64(alloc) / float64(total), nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux architecture Go builds for.
const clockTicks = 100

// clusterCPU is the CPU seconds, user and system, that the cluster's
// running processes have used, by role (0 for one whose /proc entry is
// gone).
type clusterCPU struct {
	leader, followers, regionServers float64
}

func (c clusterCPU) total() float64 { return c.leader + c.followers + c.regionServers }

// processesCPU reads the cluster's processes' CPU, leader being the
// master the phase is measured on.
func (c *benchCluster) processesCPU(leader *benchMaster) clusterCPU {
	var cpu clusterCPU
	for _, m := range c.masters {
		if m == leader {
			cpu.leader += pidCPUSeconds(m.Pid())
		} else {
			cpu.followers += pidCPUSeconds(m.Pid())
		}
	}
	for _, s := range c.servers {
		cpu.regionServers += pidCPUSeconds(s.Pid())
	}
	return cpu
}

// pidCPUSeconds is the CPU seconds process pid has used, 0 if it is gone
// (or pid is not a process's).
func pidCPUSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return statCPUSeconds(string(b))
}

// statCPUSeconds is the user and system CPU seconds of a /proc/PID/stat
// line (0 if it is not one).
func statCPUSeconds(line string) float64 {
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields are counted after its last closing parenthesis (utime
	// and stime are fields 14 and 15 of the line, 12 and 13 after it).
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, uerr := strconv.ParseUint(f[11], 10, 64)
	s, serr := strconv.ParseUint(f[12], 10, 64)
	if uerr != nil || serr != nil {
		return 0
	}
	return float64(u+s) / clockTicks
}

// machineJiffies reads the machine's CPU time, busy and in all, from
// /proc/stat's first line (0, 0 where there is none).
func machineJiffies() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle and iowait
			busy += n
		}
	}
	return busy, total
}
