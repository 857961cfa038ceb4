package cluster

import (
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/promkit"
)

// raftStates are the values of baton_raft_state's state label, one series
// each, so that a dashboard can graph who leads without decoding an enum.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

// nodeCollector reports a master's own state when Prometheus scrapes:
// Raft's view (state, term, leader, indexes, last contact) and its local
// WAL. Every master reports these, each about itself.
type nodeCollector struct {
	n *Node

	state, term, leader, lastIndex, commitIndex, appliedIndex, fsmIndex *prometheus.Desc
	lastContact, executor, storageFailed                                *prometheus.Desc

	walSegments, walSegmentBytes, walLive, walLiveBytes               *prometheus.Desc
	walWritten, walRecords, walSyncs, walRolls, walDeleted, walRewrit *prometheus.Desc
	walRewriteBytes                                                   *prometheus.Desc

	clusterFormat, buildInfo *prometheus.Desc

	autopilotPromotions, autopilotRemovals, autopilotMembers *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	d := promkit.Desc
	return &nodeCollector{
		n:            n,
		state:        d("baton_raft_state", "1 for this master's Raft state (leader, follower, candidate, shutdown), 0 for the others.", "state"),
		term:         d("baton_raft_term", "This master's current Raft term."),
		leader:       d("baton_raft_leader", "1, labelled with the id of the leader this master knows of; absent while it knows none.", "id"),
		lastIndex:    d("baton_raft_last_log_index", "Index of the last entry in this master's Raft log."),
		commitIndex:  d("baton_raft_commit_index", "Highest Raft log index this master knows committed."),
		appliedIndex: d("baton_raft_applied_index", "Highest Raft log index applied to this master's FSM, as Raft counts it."),
		fsmIndex:     d("baton_fsm_applied_index", "Raft index of the last command the FSM applied (its own count, which the local WAL records)."),
		lastContact: d("baton_raft_last_contact_seconds",
			"Seconds since this master last heard from the leader: 0 on the leader, absent before any contact."),
		executor:      d("baton_executor_running", "1 while this master leads and its procedure executor runs."),
		storageFailed: d("baton_storage_failed", "1 after a local storage failure (Raft log, stable store or local WAL): the master reports not ready until restarted."),

		walSegments:     d("baton_wal_segments", "Live segments of this master's local WAL, the current one included."),
		walSegmentBytes: d("baton_wal_segment_bytes", "Size on disk of the live segments of this master's local WAL."),
		walLive:         d("baton_wal_live_records", "Live images (procedures and domain keys) in this master's local WAL."),
		walLiveBytes:    d("baton_wal_live_bytes", "Encoded size of the live images in this master's local WAL."),
		walWritten:      d("baton_wal_written_bytes_total", "Bytes written to the local WAL, headers and trailers included (since it was opened)."),
		walRecords:      d("baton_wal_records_total", "Records written to the local WAL, those of cleanup's merges included."),
		walSyncs:        d("baton_wal_syncs_total", "Group commits of the local WAL."),
		walRolls:        d("baton_wal_rolls_total", "Segments of the local WAL rolled."),
		walDeleted:      d("baton_wal_segments_deleted_total", "Segments of the local WAL removed by cleanup."),
		walRewrit:       d("baton_wal_rewritten_records_total", "Live images the local WAL's cleanup copied, merging sparse segments so that their dead images can go."),
		walRewriteBytes: d("baton_wal_rewrite_bytes_total", "Bytes of the files the local WAL's cleanup wrote, merging sparse segments."),

		clusterFormat: d("baton_cluster_format", "The cluster version this master's replicated state holds: the format level every member reads, raised by the leader once all members report it."),
		buildInfo:     d("baton_build_info", "1, labelled with this master's binary: its version and the highest format level it writes and reads.", "version", "max_format"),

		autopilotPromotions: d("baton_autopilot_promotions_total", "Non-voters this master's autopilot promoted to voter while it led."),
		autopilotRemovals:   d("baton_autopilot_removals_total", "Dead voters this master's autopilot removed while it led."),
		autopilotMembers: d("baton_autopilot_members",
			"Members of the Raft configuration by suffrage (voter, nonvoter) and health (healthy, unhealthy), as the leader's autopilot last saw them; the leader alone reports it.", "suffrage", "health"),
	}
}

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	promkit.Describe(ch, c.state, c.term, c.leader, c.lastIndex, c.commitIndex, c.appliedIndex, c.fsmIndex,
		c.lastContact, c.executor, c.storageFailed, c.walSegments, c.walSegmentBytes, c.walLive, c.walLiveBytes,
		c.walWritten, c.walRecords, c.walSyncs, c.walRolls, c.walDeleted, c.walRewrit, c.walRewriteBytes,
		c.clusterFormat, c.buildInfo, c.autopilotPromotions, c.autopilotRemovals, c.autopilotMembers)
}

// Collect implements prometheus.Collector. It reads Raft's and the FSM's
// getters only: a scrape never waits for the Raft loop.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	state := n.raft.State()
	for _, s := range raftStates {
		gauge(c.state, boolValue(s == state), strings.ToLower(s.String()))
	}
	gauge(c.term, float64(n.raft.CurrentTerm()))
	if id, _ := n.Leader(); id != "" {
		gauge(c.leader, 1, id)
	}
	gauge(c.lastIndex, float64(n.raft.LastIndex()))
	gauge(c.commitIndex, float64(n.raft.CommitIndex()))
	gauge(c.appliedIndex, float64(n.raft.AppliedIndex()))
	gauge(c.fsmIndex, float64(n.fsm.AppliedIndex()))
	switch last := n.raft.LastContact(); {
	case state == raft.Leader:
		gauge(c.lastContact, 0)
	case !last.IsZero():
		gauge(c.lastContact, time.Since(last).Seconds())
	}
	n.mu.Lock()
	running := n.exec != nil
	n.mu.Unlock()
	gauge(c.executor, boolValue(running))
	gauge(c.storageFailed, boolValue(n.StorageErr() != nil))
	gauge(c.clusterFormat, float64(n.ClusterFormat()))
	gauge(c.buildInfo, 1, n.cfg.Build.Version, strconv.FormatUint(uint64(n.cfg.Build.MaxFormat), 10))

	counter(c.autopilotPromotions, n.autopilotStats.promotions.Load())
	counter(c.autopilotRemovals, n.autopilotStats.removals.Load())
	if seen, ok := n.autopilotStats.lastLook(); ok {
		// Every series, zeros included, so that a lost voter shows as a
		// drop rather than a series gone.
		for _, s := range []raft.ServerSuffrage{raft.Voter, raft.Nonvoter} {
			for _, healthy := range []bool{true, false} {
				gauge(c.autopilotMembers, float64(seen[memberKind{s, healthy}]), strings.ToLower(s.String()), healthName(healthy))
			}
		}
	}

	st, ok := n.fsm.WALStats()
	if !ok {
		return
	}
	gauge(c.walSegments, float64(st.Segments))
	gauge(c.walSegmentBytes, float64(st.SegmentBytes))
	gauge(c.walLive, float64(st.Live))
	gauge(c.walLiveBytes, float64(st.LiveBytes))
	counter(c.walWritten, st.Bytes)
	counter(c.walRecords, st.Records)
	counter(c.walSyncs, st.Syncs)
	counter(c.walRolls, st.Rolls)
	counter(c.walDeleted, st.SegmentsDeleted)
	counter(c.walRewrit, st.StragglersRewritten)
	counter(c.walRewriteBytes, st.RewriteBytes)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func healthName(healthy bool) string {
	if healthy {
		return "healthy"
	}
	return "unhealthy"
}
