package procedure

import (
	"time"

	"github.com/baton-dev/baton/internal/clock"
)

// armEvictor schedules the periodic deletion of expired results (HBase's
// CompletedProcedureCleaner): a finished root is kept ResultTTL after it
// finished, or AckedResultTTL after its result was acknowledged.
func (x *Executor) armEvictor() {
	x.arm(&x.evictTimer, x.cfg.EvictInterval, func() { x.EvictExpired() })
}

// arm runs run every interval, its timer kept in *t, until the executor
// stops.
func (x *Executor) arm(t *clock.Timer, interval time.Duration, run func()) {
	x.mu.Lock()
	defer x.unlock()
	if x.stopping {
		return
	}
	*t = x.clock.AfterFunc(interval, func() {
		run()
		x.arm(t, interval, run)
	})
}

// EvictExpired deletes every finished root whose result has expired and
// returns how many it deleted. It runs every Config.EvictInterval by itself.
func (x *Executor) EvictExpired() int {
	// No Ack rewrites a record meanwhile: it would write an evicted one
	// back.
	x.fin.rewrite.Lock()
	defer x.fin.rewrite.Unlock()
	now := x.clock.Now().UnixNano()
	x.mu.Lock()
	if x.stopping {
		x.unlock()
		return 0
	}
	var ids []uint64
	for _, r := range x.finished.rows {
		if r.expiresAt() <= now {
			ids = append(ids, r.id)
		}
	}
	if len(ids) == 0 {
		x.unlock()
		return 0
	}
	// Their records name their nonces, and are read before they go.
	recs := make([][]byte, len(ids))
	for i, id := range ids {
		recs[i], _ = x.finishedRecordLocked(id)
	}
	x.unlock()
	if err := x.store.Delete(ids); err != nil {
		x.setFatal(err)
		return 0
	}
	x.mu.Lock()
	for i, id := range ids {
		x.forgetFinishedLocked(id, recs[i])
	}
	x.finished.deleteSorted(ids)
	x.children.deleteSorted(ids)
	x.fin.nonces.merge()
	x.unlock()
	x.log.Debug("evicted finished procedures", "count", len(ids))
	return len(ids)
}

// armMonitor schedules the stuck-worker check (HBase's WorkerMonitor): when
// at least half the core workers have been on one step longer than
// StuckThreshold, a keep-alive worker is added so queued procedures are not
// starved by stuck ones.
func (x *Executor) armMonitor() {
	x.arm(&x.monitorTimer, x.cfg.StuckCheckInterval, func() { x.CheckStuckWorkers() })
}

// CheckStuckWorkers counts stuck workers, adds a keep-alive worker if half
// the core pool is stuck, and returns the stuck count.
func (x *Executor) CheckStuckWorkers() int {
	threshold := x.clock.Now().Add(-x.cfg.StuckThreshold).UnixNano()
	x.mu.Lock()
	defer x.unlock()
	if x.stopping {
		return 0
	}
	stuck := 0
	for w := range x.workers {
		if s := w.stepStart.Load(); s != 0 && s < threshold {
			stuck++
		}
	}
	x.metrics.stuck.Set(float64(stuck))
	if stuck > 0 && stuck*2 >= x.cfg.Workers && x.extra < x.cfg.MaxExtraWorkers {
		x.log.Warn("workers stuck; adding a keep-alive worker", "stuck", stuck, "workers", len(x.workers))
		x.startWorkerLocked(true)
	}
	return stuck
}

// Workers returns the number of worker goroutines, core and keep-alive.
func (x *Executor) Workers() int {
	x.mu.Lock()
	defer x.unlock()
	return len(x.workers)
}
