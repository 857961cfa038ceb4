package admin

import (
	"errors"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// InstallRaftMetrics exports hashicorp/raft's own metrics on reg under
// stable Prometheus names (RaftMetricNames lists them). raft emits them
// through go-metrics' process-global sink, named by go-metrics keys
// ("raft.commitTime", in milliseconds); the first call installs, as that
// global sink, one that keeps the keys of RaftMetricNames, under their
// names, in base units, and drops the others. Every call registers the
// metrics on its reg (once per registry; calling again is harmless), so
// that each registry of a process serves them.
//
// The metrics are per process, not per node: raft's keys carry no node
// id, so several nodes in one process (tests) add up.
func InstallRaftMetrics(reg prometheus.Registerer) error {
	raftSinkOnce.Do(func() {
		sink := newRaftSink()
		conf := gometrics.DefaultConfig("") // no service prefix: keys as raft names them
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false // the Go collector covers the runtime
		conf.EnableServiceLabel = false
		conf.TimerGranularity = time.Millisecond
		if _, err := gometrics.NewGlobal(conf, sink); err != nil {
			raftSinkErr = err
			return
		}
		raftSinkInstalled = sink
	})
	if raftSinkErr != nil {
		return raftSinkErr
	}
	err := reg.Register(raftSinkInstalled)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}

var (
	raftSinkOnce      sync.Once
	raftSinkInstalled *raftSink
	raftSinkErr       error
)

// RaftMetricNames maps each go-metrics key of hashicorp/raft that Baton
// exports to its Prometheus family. Keys not listed are dropped. Durations
// are converted from raft's milliseconds to seconds.
var RaftMetricNames = map[string]string{
	"raft.apply":                           "baton_raft_apply_total",
	"raft.barrier":                         "baton_raft_barrier_total",
	"raft.verify_leader":                   "baton_raft_verify_leader_total",
	"raft.state.follower":                  "baton_raft_state_transitions_total",
	"raft.state.candidate":                 "baton_raft_state_transitions_total",
	"raft.state.leader":                    "baton_raft_state_transitions_total",
	"raft.transition.heartbeat_timeout":    "baton_raft_heartbeat_timeouts_total",
	"raft.transition.leader_lease_timeout": "baton_raft_leader_lease_timeouts_total",
	"raft.replication.appendEntries.logs":  "baton_raft_replicated_entries_total",
	"raft.commitTime":                      "baton_raft_commit_duration_seconds",
	"raft.fsm.apply":                       "baton_raft_fsm_apply_duration_seconds",
	"raft.fsm.applyBatch":                  "baton_raft_fsm_apply_batch_duration_seconds",
	"raft.fsm.applyBatchNum":               "baton_raft_fsm_apply_batch_entries",
	"raft.fsm.enqueue":                     "baton_raft_fsm_enqueue_duration_seconds",
	"raft.fsm.snapshot":                    "baton_raft_fsm_snapshot_duration_seconds",
	"raft.fsm.restore":                     "baton_raft_fsm_restore_duration_seconds",
	"raft.leader.dispatchLog":              "baton_raft_leader_dispatch_duration_seconds",
	"raft.leader.lastContact":              "baton_raft_leader_follower_contact_seconds",
	"raft.rpc.appendEntries":               "baton_raft_rpc_duration_seconds",
	"raft.rpc.requestVote":                 "baton_raft_rpc_duration_seconds",
	"raft.rpc.installSnapshot":             "baton_raft_rpc_duration_seconds",
	"raft.rpc.processHeartbeat":            "baton_raft_rpc_duration_seconds",
	"raft.rpc.appendEntries.storeLogs":     "baton_raft_follower_store_logs_duration_seconds",
	"raft.replication.appendEntries.rpc":   "baton_raft_replication_append_entries_duration_seconds",
	"raft.replication.heartbeat":           "baton_raft_replication_heartbeat_duration_seconds",
	"raft.replication.installSnapshot":     "baton_raft_replication_install_snapshot_duration_seconds",
	"raft.snapshot.create":                 "baton_raft_snapshot_duration_seconds",
	"raft.snapshot.persist":                "baton_raft_snapshot_duration_seconds",
	"raft.snapshot.takeSnapshot":           "baton_raft_snapshot_duration_seconds",
	"raft.compactLogs":                     "baton_raft_compact_logs_duration_seconds",
	"raft.commitNumLogs":                   "baton_raft_commit_batch_entries",
	"raft.leader.dispatchNumLogs":          "baton_raft_leader_dispatch_batch_entries",
	"raft.peers":                           "baton_raft_peers",
	"raft.thread.main.saturation":          "baton_raft_thread_saturation_ratio",
	"raft.thread.fsm.saturation":           "baton_raft_thread_saturation_ratio",
}

// raftFamily is one exported family: its help, how raft's values map to
// it, and its labels (a fixed one per key, and go-metrics labels kept).
type raftFamily struct {
	help    string
	kind    raftKind
	fixed   string            // label set per key (keyValue's), "" for none
	keyVals map[string]string // go-metrics key → fixed label value
	kept    []string          // go-metrics labels kept as Prometheus labels (peer_id)
	vec     prometheus.Collector
}

type raftKind int

const (
	raftCounter raftKind = iota
	raftSeconds          // a go-metrics sample in milliseconds, as a histogram in seconds
	raftCount            // a go-metrics sample of a count, as a histogram
	raftGauge            // a gauge, or a sample kept as its last value
)

// raftFamilies describes each family of RaftMetricNames.
func raftFamilies() map[string]*raftFamily {
	peer := []string{"peer_id"}
	return map[string]*raftFamily{
		"baton_raft_apply_total":                      {help: "Commands this node appended as leader through Raft's Apply (each one a group commit of procedure writes).", kind: raftCounter},
		"baton_raft_barrier_total":                    {help: "Raft barriers issued (a new leader waits on one before it starts its executor).", kind: raftCounter},
		"baton_raft_verify_leader_total":              {help: "Leadership verifications (quorum rounds of linearizable reads).", kind: raftCounter},
		"baton_raft_state_transitions_total":          {help: "Raft state changes, by the state entered (follower, candidate, leader).", kind: raftCounter, fixed: "to", keyVals: map[string]string{"raft.state.follower": "follower", "raft.state.candidate": "candidate", "raft.state.leader": "leader"}},
		"baton_raft_heartbeat_timeouts_total":         {help: "Times a follower heard nothing from the leader within the heartbeat timeout and started an election.", kind: raftCounter},
		"baton_raft_leader_lease_timeouts_total":      {help: "Times a leader stepped down for not hearing from a quorum within the lease timeout.", kind: raftCounter},
		"baton_raft_replicated_entries_total":         {help: "Log entries the leader replicated, by follower.", kind: raftCounter, kept: peer},
		"baton_raft_commit_duration_seconds":          {help: "Time from a leader appending an entry to its commit.", kind: raftSeconds},
		"baton_raft_fsm_apply_duration_seconds":       {help: "Time the FSM took to apply one entry (outside batches).", kind: raftSeconds},
		"baton_raft_fsm_apply_batch_duration_seconds": {help: "Time the FSM took to apply one batch of entries.", kind: raftSeconds},
		"baton_raft_fsm_apply_batch_entries":          {help: "Entries per batch the FSM applied.", kind: raftCount},
		"baton_raft_fsm_enqueue_duration_seconds":     {help: "Time committed entries waited to be handed to the FSM.", kind: raftSeconds},
		"baton_raft_fsm_snapshot_duration_seconds":    {help: "Time the FSM took to capture a snapshot.", kind: raftSeconds},
		"baton_raft_fsm_restore_duration_seconds":     {help: "Time the FSM took to restore a snapshot.", kind: raftSeconds},
		"baton_raft_leader_dispatch_duration_seconds": {help: "Time the leader took to write a batch of new entries to its log.", kind: raftSeconds},
		"baton_raft_leader_follower_contact_seconds":  {help: "Time since the leader last heard from a follower, sampled at each lease check.", kind: raftSeconds},
		"baton_raft_rpc_duration_seconds": {help: "Time a node took to process a Raft RPC, by rpc (append_entries, request_vote, install_snapshot, heartbeat).", kind: raftSeconds, fixed: "rpc",
			keyVals: map[string]string{"raft.rpc.appendEntries": "append_entries", "raft.rpc.requestVote": "request_vote", "raft.rpc.installSnapshot": "install_snapshot", "raft.rpc.processHeartbeat": "heartbeat"}},
		"baton_raft_follower_store_logs_duration_seconds":          {help: "Time a follower took to store the entries of one AppendEntries.", kind: raftSeconds},
		"baton_raft_replication_append_entries_duration_seconds":   {help: "Time of an AppendEntries round trip from the leader, by follower.", kind: raftSeconds, kept: peer},
		"baton_raft_replication_heartbeat_duration_seconds":        {help: "Time of a heartbeat round trip from the leader, by follower.", kind: raftSeconds, kept: peer},
		"baton_raft_replication_install_snapshot_duration_seconds": {help: "Time the leader took to send a snapshot, by follower.", kind: raftSeconds, kept: peer},
		"baton_raft_snapshot_duration_seconds": {help: "Time to take a Raft snapshot, by phase (create, persist, total).", kind: raftSeconds, fixed: "phase",
			keyVals: map[string]string{"raft.snapshot.create": "create", "raft.snapshot.persist": "persist", "raft.snapshot.takeSnapshot": "total"}},
		"baton_raft_compact_logs_duration_seconds": {help: "Time to compact the Raft log after a snapshot.", kind: raftSeconds},
		"baton_raft_commit_batch_entries":          {help: "Entries the leader committed in its last commit.", kind: raftGauge},
		"baton_raft_leader_dispatch_batch_entries": {help: "Entries the leader wrote to its log in its last write.", kind: raftGauge},
		"baton_raft_peers":                         {help: "Members of the latest Raft configuration, as the leader last counted them.", kind: raftGauge},
		"baton_raft_thread_saturation_ratio": {help: "Share of time Raft's thread spent working rather than waiting, over its last report interval, by thread (main, fsm).", kind: raftGauge, fixed: "thread",
			keyVals: map[string]string{"raft.thread.main.saturation": "main", "raft.thread.fsm.saturation": "fsm"}},
	}
}

// raftSink is a go-metrics sink keeping raft's metrics of RaftMetricNames,
// and the Prometheus collector that reports them.
type raftSink struct {
	families map[string]*raftFamily // by Prometheus name
}

func newRaftSink() *raftSink {
	fams := raftFamilies()
	for name, f := range fams {
		var labels []string
		if f.fixed != "" {
			labels = append(labels, f.fixed)
		}
		labels = append(labels, f.kept...)
		switch f.kind {
		case raftCounter:
			f.vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: f.help}, labels)
		case raftSeconds:
			f.vec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: f.help,
				Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}, labels) // 0.1 ms .. 26 s
		case raftCount:
			f.vec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: f.help,
				Buckets: prometheus.ExponentialBuckets(1, 2, 11)}, labels) // 1 .. 1024
		case raftGauge:
			f.vec = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: f.help}, labels)
		}
	}
	return &raftSink{families: fams}
}

// Describe implements prometheus.Collector.
func (s *raftSink) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range s.families {
		f.vec.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s *raftSink) Collect(ch chan<- prometheus.Metric) {
	for _, f := range s.families {
		f.vec.Collect(ch)
	}
}

// family finds key's family and its label values, or nil.
func (s *raftSink) family(key []string, labels []gometrics.Label) (*raftFamily, []string) {
	k := strings.Join(key, ".")
	name, ok := RaftMetricNames[k]
	if !ok {
		return nil, nil
	}
	f := s.families[name]
	var vals []string
	if f.fixed != "" {
		vals = append(vals, f.keyVals[k])
	}
	for _, want := range f.kept {
		v := ""
		for _, l := range labels {
			if l.Name == want {
				v = l.Value
			}
		}
		vals = append(vals, v)
	}
	return f, vals
}

func (s *raftSink) record(key []string, val float32, labels []gometrics.Label) {
	f, vals := s.family(key, labels)
	if f == nil {
		return
	}
	switch v := f.vec.(type) {
	case *prometheus.CounterVec:
		if val >= 0 {
			v.WithLabelValues(vals...).Add(float64(val))
		}
	case *prometheus.HistogramVec:
		x := float64(val)
		if f.kind == raftSeconds {
			x /= 1000 // go-metrics times are in TimerGranularity: milliseconds
		}
		v.WithLabelValues(vals...).Observe(x)
	case *prometheus.GaugeVec:
		v.WithLabelValues(vals...).Set(float64(val))
	}
}

// SetGauge implements go-metrics' MetricSink.
func (s *raftSink) SetGauge(key []string, val float32) { s.record(key, val, nil) }

// SetGaugeWithLabels implements go-metrics' MetricSink.
func (s *raftSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.record(key, val, labels)
}

// EmitKey implements go-metrics' MetricSink; raft emits no keys.
func (s *raftSink) EmitKey(key []string, val float32) {}

// IncrCounter implements go-metrics' MetricSink.
func (s *raftSink) IncrCounter(key []string, val float32) { s.record(key, val, nil) }

// IncrCounterWithLabels implements go-metrics' MetricSink.
func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.record(key, val, labels)
}

// AddSample implements go-metrics' MetricSink.
func (s *raftSink) AddSample(key []string, val float32) { s.record(key, val, nil) }

// AddSampleWithLabels implements go-metrics' MetricSink.
func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.record(key, val, labels)
}

var _ gometrics.MetricSink = (*raftSink)(nil)
