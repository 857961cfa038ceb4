package bench

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MachineBaseline is what the machine could do just before a row's
// cluster started, measured by the bench itself: the same machine kind
// runs twice as slow on one day as on another (other tenants), so a row
// is read against its own baseline, and two runs compare by their ratios
// to theirs, not by their absolute figures.
type MachineBaseline struct {
	// CPUOpsPerSecond is a fixed unit of master-like work (a region record
	// encoded as JSON, hashed and dropped: allocation, encoding, GC)
	// done per second by GOMAXPROCS goroutines for cpuBaselineFor.
	CPUOpsPerSecond float64 `json:"cpu_ops_per_second"`
	CPUs            int     `json:"cpus"`
	// FsyncMs is the median of fsyncBaselineWrites 4 KiB appends, each
	// followed by an fsync, in the row's directory: the floor under
	// every Raft log write.
	FsyncMs float64 `json:"fsync_ms"`
}

const (
	cpuBaselineFor      = time.Second
	fsyncBaselineWrites = 100
)

// measureMachine measures the baseline in dir (created if missing; its
// probe file is removed).
func measureMachine(ctx context.Context, dir string) (MachineBaseline, error) {
	b := MachineBaseline{CPUs: runtime.GOMAXPROCS(0)}
	b.CPUOpsPerSecond = cpuOpsPerSecond(ctx, b.CPUs, cpuBaselineFor)
	ms, err := fsyncMedianMs(ctx, dir, fsyncBaselineWrites)
	if err != nil {
		return b, fmt.Errorf("machine baseline: %w", err)
	}
	b.FsyncMs = ms
	return b, ctx.Err()
}

// baselineRecord is shaped like a region's record.
type baselineRecord struct {
	Table     string `json:"table"`
	State     string `json:"state"`
	Server    string `json:"server"`
	StartCode int64  `json:"start_code"`
	ProcID    uint64 `json:"proc_id"`
}

func cpuOpsPerSecond(ctx context.Context, workers int, d time.Duration) float64 {
	var ops atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			var sink byte
			for i := 0; ; i++ {
				if i%256 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
					break
				}
				rec := baselineRecord{Table: "default:t" + strconv.Itoa(w), State: "OPEN", Server: "rs" + strconv.Itoa(i%10), StartCode: int64(i), ProcID: uint64(i)}
				buf, _ := json.Marshal(&rec)
				sum := sha256.Sum256(buf)
				sink ^= sum[0]
				ops.Add(1)
			}
			_ = sink
		})
	}
	wg.Wait()
	return float64(ops.Load()) / time.Since(start).Seconds()
}

func fsyncMedianMs(ctx context.Context, dir string, writes int) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	path := filepath.Join(dir, "fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	block := make([]byte, 4096)
	times := make([]time.Duration, 0, writes)
	for range writes {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		times = append(times, time.Since(t))
	}
	slices.Sort(times)
	return float64(times[len(times)/2]) / float64(time.Millisecond), nil
}
