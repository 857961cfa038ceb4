package admin

import (
	"errors"
	"sync"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

var raftMetricsOnce struct {
	sync.Mutex
	done bool
}

// ErrRaftMetricsInstalled is returned by InstallRaftMetrics after the first
// successful call.
var ErrRaftMetricsInstalled = errors.New("admin: raft metrics already installed in this process")

// InstallRaftMetrics routes hashicorp/raft's metrics (raft_apply,
// raft_commitTime, raft_leader_lastContact, raft_fsm_apply, ...) to reg.
// raft emits them through go-metrics' process-global sink (the go-metrics
// compat layer, armon/go-metrics unless built with the hashicorpmetrics
// tag), so this installs a Prometheus sink as that global sink, once per
// process: later calls return ErrRaftMetricsInstalled. Call it from main,
// not from tests that run several nodes in one process.
func InstallRaftMetrics(reg prometheus.Registerer) error {
	raftMetricsOnce.Lock()
	defer raftMetricsOnce.Unlock()
	if raftMetricsOnce.done {
		return ErrRaftMetricsInstalled
	}
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Expiration: gmprom.DefaultPrometheusOpts.Expiration})
	if err != nil {
		return err
	}
	if err := reg.Register(sink); err != nil {
		return err
	}
	conf := gometrics.DefaultConfig("baton")
	conf.EnableHostname = false
	conf.EnableHostnameLabel = false
	conf.EnableRuntimeMetrics = false // the Go collector covers the runtime
	conf.EnableServiceLabel = false
	if _, err := gometrics.NewGlobal(conf, sink); err != nil {
		reg.Unregister(sink)
		return err
	}
	raftMetricsOnce.done = true
	return nil
}
