package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// A sample counts for the first part any frame of its stack names, in
// profileParts' order: a bolt write under raft's leader loop is the log
// write, not "raft: other"; what no part names is "other".
func TestProfileShares(t *testing.T) {
	fn := map[string]*profile.Function{}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DurationNanos: 2e9,
	}
	stack := func(names ...string) []*profile.Location {
		var locs []*profile.Location
		for _, n := range names { // leaf first, as pprof keeps them
			f := fn[n]
			if f == nil {
				f = &profile.Function{ID: uint64(len(fn) + 1), Name: n}
				fn[n] = f
				p.Function = append(p.Function, f)
			}
			l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
			p.Location = append(p.Location, l)
			locs = append(locs, l)
		}
		return locs
	}
	add := func(ns int64, names ...string) {
		p.Sample = append(p.Sample, &profile.Sample{Location: stack(names...), Value: []int64{1, ns}})
	}
	add(500e6, "go.etcd.io/bbolt.(*Tx).Commit", "github.com/hashicorp/raft-boltdb/v2.(*BoltStore).StoreLogs", "github.com/hashicorp/raft.(*Raft).dispatchLogs", "github.com/hashicorp/raft.(*Raft).leaderLoop")
	add(300e6, "runtime.mallocgc", "github.com/baton-dev/baton/procedure.(*Executor).encode", "github.com/baton-dev/baton/procedure.(*Executor).step")
	add(100e6, "github.com/hashicorp/raft.(*Raft).processHeartbeat", "github.com/hashicorp/raft.(*Raft).leaderLoop")
	add(100e6, "main.somethingElse")
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	shares, alloc, err := profileShares(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"raft: leader log write (bolt, fsync)": 0.5,
		"executor: encoding records":           0.3,
		"raft: other (leader loop, commits)":   0.1,
		"other":                                0.1,
	}
	if len(shares) != len(want) {
		t.Fatalf("shares %+v, want %v", shares, want)
	}
	for i, s := range shares {
		if w, ok := want[s.Part]; !ok || math.Abs(s.Share-w) > 1e-9 {
			t.Errorf("part %q share %.3f, want %v", s.Part, s.Share, w)
		}
		if i > 0 && s.Share > shares[i-1].Share {
			t.Errorf("shares not largest first: %+v", shares)
		}
	}
	if math.Abs(shares[0].Cores-0.25) > 1e-9 {
		t.Errorf("the log write's cores %.3f, want 0.25 (0.5 s of CPU over a 2 s profile)", shares[0].Cores)
	}
	if math.Abs(alloc-0.3) > 1e-9 {
		t.Errorf("allocation share %.3f, want 0.3", alloc)
	}

	var b strings.Builder
	printLeaderWork(&b, ScaleRow{Regions: 100, Shape: "1x100", Machine: MachineBaseline{CPUs: 2}}, "the open",
		&LeaderWork{Seconds: 2, CPUCores: 1, OfMachineCPU: 0.5, LogWritesPerSecond: 10, MachineFsyncsPerSecond: 1000, OfMachineFsyncs: 0.01, Profile: shares, Allocation: alloc})
	for _, w := range []string{"CPU 1.00 cores, 50% of the machine's 2", "1% of the 1000 fsyncs/s", "raft: leader log write (bolt, fsync)  50.0%", "allocating: 30.0%"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("printed:\n%s\nwant %q in it", b.String(), w)
		}
	}

	if _, _, err := profileShares(filepath.Join(t.TempDir(), "none.pprof")); err == nil {
		t.Error("a missing profile: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.pprof")
	os.WriteFile(bad, []byte("not a profile"), 0o644)
	if _, _, err := profileShares(bad); err == nil {
		t.Error("a corrupt profile: no error")
	}
}

// A process's CPU is read after its command name, whatever that holds.
func TestStatCPUSeconds(t *testing.T) {
	line := "4242 (baton (m1) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000000 500 18446744073709551615"
	if got := statCPUSeconds(line); math.Abs(got-3) > 1e-9 {
		t.Errorf("utime 250 + stime 50 ticks: %v s, want 3", got)
	}
	for _, bad := range []string{"", "no parenthesis", "1 (x) S 1 2"} {
		if got := statCPUSeconds(bad); got != 0 {
			t.Errorf("%q: %v, want 0", bad, got)
		}
	}
	if busy, total := machineJiffies(); total > 0 && busy > total {
		t.Errorf("machine busy %d of %d jiffies", busy, total)
	}
}
