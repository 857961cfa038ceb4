package regionserver

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/proto/rspb"
)

// A region server keeps no audit trail: it tells the leader of the calls
// it refused, in its heartbeats (rspb.HeartbeatRequest.refusals), and the
// leader records them. Between heartbeats they wait in a fixed-size
// buffer: a flood of refusals drops the oldest (counted), never grows the
// server's memory, and a heartbeat carries at most refusalBatch of them.

const (
	// refusalBuffer bounds the refusals waiting for a heartbeat.
	refusalBuffer = 1024
	// refusalBatch bounds the refusals one heartbeat carries.
	refusalBatch = 128
	// refusalMessageMax cuts a refusal's message.
	refusalMessageMax = 512
)

type pendingRefusal struct {
	seq uint64
	rep *rspb.RefusalReport
}

// refusalQueue is the buffer. Safe for concurrent use.
type refusalQueue struct {
	droppedTotal prometheus.Counter

	mu      sync.Mutex
	queue   []pendingRefusal
	next    uint64 // seq of the next refusal
	dropped uint64 // dropped since the last heartbeat answered
}

func newRefusalQueue() *refusalQueue {
	return &refusalQueue{droppedTotal: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "baton", Subsystem: "regionserver", Name: "refusal_reports_dropped_total",
		Help: "Refusals not reported to the masters for the audit trail: the buffer awaiting the next heartbeat was full (the oldest go).",
	})}
}

func (q *refusalQueue) add(rep *rspb.RefusalReport) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) >= refusalBuffer {
		q.queue = append(q.queue[:0], q.queue[1:]...)
		q.dropped++
		q.droppedTotal.Inc()
	}
	q.next++
	q.queue = append(q.queue, pendingRefusal{seq: q.next, rep: rep})
}

// batch is what the next heartbeat carries, and the mark to pass to sent
// once it was answered.
func (q *refusalQueue) batch() (reps []*rspb.RefusalReport, dropped, mark uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.queue[:min(len(q.queue), refusalBatch)] {
		reps = append(reps, p.rep)
		mark = p.seq
	}
	return reps, q.dropped, mark
}

// sent drops what an answered heartbeat carried: refusals up to mark (those
// dropped meanwhile are gone already) and the drops it counted.
func (q *refusalQueue) sent(mark, dropped uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(q.queue) && q.queue[n].seq <= mark {
		n++
	}
	q.queue = append(q.queue[:0], q.queue[n:]...)
	q.dropped -= min(q.dropped, dropped)
}
