package raftfsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/store"
)

// nopFSM is the baseline's FSM: it accepts every entry and keeps nothing.
type nopFSM struct{ n atomic.Uint64 }

func (f *nopFSM) Apply(*raft.Log) any                 { f.n.Add(1); return nil }
func (f *nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (f *nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

// runWriters runs b.N calls of op spread over w goroutines and returns the
// elapsed time.
func runWriters(b *testing.B, w int, op func(i uint64) error) time.Duration {
	var next atomic.Uint64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range w {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > uint64(b.N) {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	b.StopTimer()
	return d
}

// BenchmarkRaftStore measures RaftStore.Update of ~1 KiB procedure images on
// a 3-node in-memory cluster (each FSM writing its local WAL, without
// fsync), against bare raft.Apply of 1 KiB entries at the same concurrency on
// an identical cluster running a no-op FSM. The bare sub-benchmark runs
// second and reports store/bare, the ratio of time per write.
func BenchmarkRaftStore(b *testing.B) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i)
	}
	for _, w := range []int{1, 16, 64} {
		var storeNs float64
		b.Run(fmt.Sprintf("writers=%d/store", w), func(b *testing.B) {
			c := newCluster(b, clusterOpts{})
			l := c.leader()
			s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
			defer s.Close()
			for id := 1; id <= w; id++ {
				if err := s.Insert(store.Proc{ID: uint64(id), Data: payload}, nil); err != nil {
					b.Fatal(err)
				}
			}
			st0 := s.Stats()
			b.SetBytes(int64(len(payload)))
			d := runWriters(b, w, func(i uint64) error {
				return s.Update(store.Proc{ID: i%uint64(w) + 1, Data: payload})
			})
			st := s.Stats()
			storeNs = float64(d.Nanoseconds()) / float64(b.N)
			if e := st.Entries - st0.Entries; e > 0 {
				b.ReportMetric(float64(st.Writes-st0.Writes)/float64(e), "writes/entry")
			}
		})
		b.Run(fmt.Sprintf("writers=%d/bare", w), func(b *testing.B) {
			c := newCluster(b, clusterOpts{newFSM: func(testing.TB, int) raft.FSM { return &nopFSM{} }})
			l := c.leader()
			b.SetBytes(int64(len(payload)))
			d := runWriters(b, w, func(uint64) error {
				return l.r.Apply(payload, 10*time.Second).Error()
			})
			bareNs := float64(d.Nanoseconds()) / float64(b.N)
			if storeNs > 0 && bareNs > 0 {
				b.ReportMetric(storeNs/bareNs, "store/bare")
			}
		})
	}
}
