package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/promkit"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
)

// StatusJSON is the /status document: cluster.Status with snake_case keys,
// plus readiness and every member's registered admin address.
type StatusJSON struct {
	ID           string     `json:"id"`
	Address      string     `json:"address"`
	AdminAddress string     `json:"admin_address,omitempty"`
	State        string     `json:"state"`
	Ready        bool       `json:"ready"`
	ReadyReason  string     `json:"ready_reason"`
	LeaderID     string     `json:"leader_id"`
	LeaderAddr   string     `json:"leader_address"`
	LeaderAdmin  string     `json:"leader_admin_address,omitempty"`
	Term         uint64     `json:"term"`
	LastIndex    uint64     `json:"last_index"`
	CommitIndex  uint64     `json:"commit_index"`
	AppliedIndex uint64     `json:"applied_index"`
	FSMIndex     uint64     `json:"fsm_index"`
	FSMWALIndex  uint64     `json:"fsm_wal_index"`
	StorageError string     `json:"storage_error,omitempty"`
	LastContact  *time.Time `json:"last_contact,omitempty"`
	Executor     bool       `json:"executor"`
	Peers        []PeerJSON `json:"peers"`
	PeersError   string     `json:"peers_error,omitempty"`
	// Maintenance is maintenance mode as this node's replicated state
	// holds it (absent on a node without the domain).
	Maintenance *MaintenanceJSON `json:"maintenance,omitempty"`
	// ClusterFormat is the cluster version this node's replicated state
	// holds (1 until the leader raises it); Version and MaxFormat are this
	// node's binary (internal/version).
	ClusterFormat uint32 `json:"cluster_format"`
	Version       string `json:"version"`
	MaxFormat     uint32 `json:"max_format"`
	// LastSnapshot is this master's newest good scheduled snapshot
	// (WithLastSnapshot); absent when it schedules none or has written
	// none yet.
	LastSnapshot *LastSnapshotJSON `json:"last_snapshot,omitempty"`
}

// LastSnapshotJSON is a scheduled snapshot in StatusJSON.
type LastSnapshotJSON struct {
	File       string    `json:"file"`
	Time       time.Time `json:"time"`
	Index      uint64    `json:"index"`
	Bytes      int64     `json:"bytes"`
	DurationMs int64     `json:"duration_ms"`
}

// MaintenanceJSON is maintenance mode in StatusJSON: on, and when, by whom
// and why it was last turned on or off (since: RFC 3339, absent if never).
type MaintenanceJSON struct {
	On     bool       `json:"on"`
	Since  *time.Time `json:"since,omitempty"`
	By     string     `json:"by,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// PeerJSON is one member in StatusJSON.
type PeerJSON struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	AdminAddress string `json:"admin_address,omitempty"`
	Suffrage     string `json:"suffrage"`
	Leader       bool   `json:"leader"`
	// Version and MaxFormat are the member's report of its binary, absent
	// while it has made none that can be read (a 0.1.0 member: format 1;
	// cluster.ReadReport).
	Version   string `json:"version,omitempty"`
	MaxFormat uint32 `json:"max_format,omitempty"`
	// The leader's view of the member, on the leader only (absent
	// elsewhere): entries behind the leader's last index (absent until
	// known), healthy as the autopilot judges, ms since it last answered.
	LagEntries      *uint64 `json:"lag_entries,omitempty"`
	Healthy         *bool   `json:"healthy,omitempty"`
	LeaderContactMs *int64  `json:"leader_contact_ms,omitempty"`
}

// StatusOf builds the /status document of b.
func StatusOf(b Backend) StatusJSON {
	st := b.Status()
	ready, why := Ready(b)
	addr := func(id string) string {
		v, _ := b.DomainGet(cluster.AdminAddrKey(id))
		return string(v)
	}
	out := StatusJSON{
		ID: st.ID, Address: st.Address, AdminAddress: addr(st.ID), State: st.State,
		Ready: ready, ReadyReason: why,
		LeaderID: st.LeaderID, LeaderAddr: st.LeaderAddr,
		Term: st.Term, LastIndex: st.LastIndex, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, FSMIndex: st.FSMIndex, FSMWALIndex: st.FSMWALIndex, StorageError: st.StorageErr,
		Executor: st.Executor, Peers: []PeerJSON{}, PeersError: st.PeersErr,
		ClusterFormat: uint32(clusterFormatOf(b)),
	}
	self := buildOf(b)
	out.Version, out.MaxFormat = self.Version, uint32(self.MaxFormat)
	if st.LeaderID != "" {
		out.LeaderAdmin = addr(st.LeaderID)
	}
	if !st.LastContact.IsZero() {
		lc := st.LastContact
		out.LastContact = &lc
	}
	for _, p := range st.Peers {
		pj := PeerJSON{ID: p.ID, Address: p.Address, AdminAddress: addr(p.ID), Suffrage: p.Suffrage, Leader: p.Leader}
		// Shown as read: none, or one that cannot be read, is absent.
		rep, _ := cluster.ReadReport(b.DomainGet, p.ID)
		pj.Version, pj.MaxFormat = rep.Version, uint32(rep.MaxFormat)
		var view adminpb.Peer
		setProgress(&view, p.Progress, time.Now())
		pj.LagEntries, pj.Healthy, pj.LeaderContactMs = view.LagEntries, view.Healthy, view.LeaderContactMs
		out.Peers = append(out.Peers, pj)
	}
	if db, ok := b.(DomainBackend); ok && db.Domain() != nil {
		if m, err := db.Domain().Maintenance(); err == nil {
			out.Maintenance = &MaintenanceJSON{On: m.On, By: m.By, Reason: m.Reason}
			if !m.Since.IsZero() {
				since := m.Since.UTC()
				out.Maintenance.Since = &since
			}
		}
	}
	return out
}

// HTTPHandler serves a node's HTTP endpoints:
//
//	/status          StatusJSON of the node
//	/readyz          200 "ready: <reason>" when ready (see Ready: a leader
//	                 known and, on a follower, caught up with it), else
//	                 503 "not ready: <reason>"
//	/livez           200 "live: <reason>" while the node is not shut down,
//	                 whatever its role (see Live), else 503
//	/metrics         Prometheus exposition of g (nil: the default gatherer),
//	                 4 scrapes at a time (promkit.MaxScrapes)
//
// and with WithDebugEndpoints:
//
//	/debug/domain    ?prefix=P: the domain keys under P in this node's FSM,
//	                 as {"entries": {key: value}} (for tests and operators;
//	                 at most 10,000 keys)
//	/debug/pprof/    the runtime profiles (net/http/pprof)
func HTTPHandler(b Backend, g prometheus.Gatherer, opts ...HTTPOption) http.Handler {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	var o httpOptions
	for _, opt := range opts {
		opt(&o)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		st := StatusOf(b)
		if o.lastSnapshot != nil {
			if l := o.lastSnapshot(); l != nil {
				st.LastSnapshot = &LastSnapshotJSON{File: l.File, Time: l.Time.UTC(), Index: l.Index, Bytes: l.Bytes, DurationMs: l.Duration.Milliseconds()}
			}
		}
		_ = enc.Encode(st)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := Ready(b)
		writeProbe(w, r, ok, "ready", why)
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		ok, why := Live(b)
		writeProbe(w, r, ok, "live", why)
	})
	mux.Handle("GET /metrics", promkit.Handler(g))
	if o.debug {
		handleDebug(mux, b)
	}
	return mux
}

// writeProbe answers a probe: 200 "<what>: why" or 503 "not <what>:
// why". Over TLS to a caller without a certificate (a kubelet) only the
// verdict is said: the reasons name the leader, its commit index and this
// member's progress, which the TLS port told certificate holders alone
// before the probes were opened to everyone.
func writeProbe(w http.ResponseWriter, r *http.Request, ok bool, what, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	verdict := what
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		verdict = "not " + what
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) == 0 {
		_, _ = w.Write([]byte(verdict + "\n"))
		return
	}
	_, _ = w.Write([]byte(verdict + ": " + why + "\n"))
}

// HTTPOption adjusts HTTPHandler.
type HTTPOption func(*httpOptions)

type httpOptions struct {
	debug        bool
	lastSnapshot func() *LastSnapshot
}

// WithLastSnapshot has /status show last's answer as last_snapshot
// (Server.LastSnapshot: the scheduled snapshots of the Server beside the
// handler).
func WithLastSnapshot(last func() *LastSnapshot) HTTPOption {
	return func(o *httpOptions) { o.lastSnapshot = last }
}

// WithDebugEndpoints serves /debug/domain and /debug/pprof/ too (`baton
// agent --debug-endpoints`). They are off by default: the first hands out
// the whole replicated state, tokens' hashes included, the second the
// process's memory and command line, and either lets a caller spend the
// node's CPU; an operator turns them on for a node being investigated.
func WithDebugEndpoints() HTTPOption { return func(o *httpOptions) { o.debug = true } }

func handleDebug(mux *http.ServeMux, b Backend) {
	mux.HandleFunc("GET /debug/domain", func(w http.ResponseWriter, r *http.Request) {
		sc, ok := b.(domainScanner)
		if !ok {
			http.Error(w, "this node keeps no domain state", http.StatusNotImplemented)
			return
		}
		const limit = 10000
		entries := map[string]string{}
		truncated := false
		sc.DomainScan(r.URL.Query().Get("prefix"), func(k string, v []byte) bool {
			if len(entries) == limit {
				truncated = true
				return false
			}
			entries[k] = string(v)
			return true
		})
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"entries": entries, "truncated": truncated})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// domainScanner is the optional part of a Backend that can list domain keys.
type domainScanner interface {
	DomainScan(prefix string, fn func(key string, value []byte) bool)
}

// domainScannerFrom is a backend that can walk its domain keys in order
// from a key on.
type domainScannerFrom interface {
	DomainScanFrom(prefix, after string, fn func(string, []byte) bool)
}
