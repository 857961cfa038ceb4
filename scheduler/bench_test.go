package scheduler

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// The figures to beat are HBase's: addBack 1.9 M ops/s and poll 0.5 M ops/s
// with 10 threads over 1,000 tables (MasterProcedureSchedulerPerformanceEvaluation).

const (
	benchGoroutines = 10
	benchTables     = 1000
)

func benchKeys() []QueueKey {
	keys := make([]QueueKey, benchTables)
	for i := range keys {
		keys[i] = QueueKey{Kind: KindTable, Name: fmt.Sprintf("ns:table-%04d", i)}
	}
	return keys
}

// parallel runs f(g, i) for i in [0, b.N) split over benchGoroutines
// goroutines, timing only that, and reports the throughput of the whole.
func parallel(b *testing.B, f func(g, i int)) {
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := 0; g < benchGoroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < b.N; i += benchGoroutines {
				f(g, i)
			}
		}(g)
	}
	wg.Wait()
	b.StopTimer()
	report(b)
}

func report(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkAddBack(b *testing.B) {
	keys := benchKeys()
	s := New(Config{})
	b.ReportAllocs()
	parallel(b, func(_, i int) {
		s.AddBack(uint64(i+1), keys[i%benchTables])
	})
	if s.Len() != b.N {
		b.Fatalf("Len %d, want %d", s.Len(), b.N)
	}
}

func BenchmarkPoll(b *testing.B) {
	keys := benchKeys()
	s := New(Config{})
	for i := 0; i < b.N; i++ {
		s.AddBack(uint64(i+1), keys[i%benchTables])
	}
	b.ReportAllocs()
	parallel(b, func(_, _ int) {
		if _, ok := s.Poll(0); !ok {
			panic("queue ran dry")
		}
	})
}

// BenchmarkAddBackPoll: every goroutine adds one id then polls one, so the
// queue stays short and pollers contend with adders; one op = add + poll.
func BenchmarkAddBackPoll(b *testing.B) {
	keys := benchKeys()
	s := New(Config{})
	b.ReportAllocs()
	parallel(b, func(_, i int) {
		s.AddBack(uint64(i+1), keys[i%benchTables])
		if _, ok := s.Poll(-1); !ok {
			panic("poll failed")
		}
	})
}

// BenchmarkBlockingPoll: 10 workers block in Poll while one producer adds,
// the executor's shape when the queue is mostly empty.
func BenchmarkBlockingPoll(b *testing.B) {
	keys := benchKeys()
	s := New(Config{})
	var (
		wg     sync.WaitGroup
		polled atomic.Int64
		done   = make(chan struct{})
	)
	for g := 0; g < benchGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, ok := s.Poll(-1); !ok {
					return
				}
				if polled.Add(1) == int64(b.N) {
					close(done)
				}
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.AddBack(uint64(i+1), keys[i%benchTables])
	}
	<-done
	b.StopTimer()
	s.Close()
	wg.Wait()
	report(b)
}

// BenchmarkAcquireRelease: 10 goroutines take and drop region locks in
// 1,000 tables (namespace S + table S + region X each).
func BenchmarkAcquireRelease(b *testing.B) {
	reqs := make([][]Lock, benchTables)
	for i := range reqs {
		reqs[i] = RegionLocks("ns", fmt.Sprintf("table-%04d", i), fmt.Sprintf("region-%04d", i))
	}
	s := New(Config{Wake: func(uint64) {}})
	key := QueueKey{Kind: KindTable}
	b.ReportAllocs()
	parallel(b, func(g, i int) {
		id := uint64(g + 1)
		if s.Acquire(id, key, nil, reqs[(i*7+g)%benchTables]) {
			s.Release(id)
		} else {
			s.CancelLockWait(id)
		}
	})
}

// BenchmarkBaselineMutexAppend is the floor an AddBack is measured against
// in the same run: 10 goroutines appending to one slice under one mutex,
// with none of the scheduler's per-entity queues, fairness or dedupe.
func BenchmarkBaselineMutexAppend(b *testing.B) {
	var mu sync.Mutex
	q := make([]uint64, 0, 1024)
	parallel(b, func(_, i int) {
		mu.Lock()
		q = append(q, uint64(i))
		mu.Unlock()
	})
}

// BenchmarkBaselineChannel: the same ids through a buffered channel, add
// then poll, as BenchmarkAddBackPoll does through the scheduler.
func BenchmarkBaselineChannel(b *testing.B) {
	ch := make(chan uint64, 1024)
	parallel(b, func(_, i int) {
		ch <- uint64(i)
		<-ch
	})
}
