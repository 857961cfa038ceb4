package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Without stale there is nothing to compare with: no kind has a ratio.
func TestReadRoundsWithoutStale(t *testing.T) {
	rows, err := readRounds([]string{"linearizable", "forwarded"}, 2, 4, func(kind string, n int) (time.Duration, time.Duration, time.Duration, error) {
		return time.Duration(1+len(kind)) * time.Millisecond, 0, 0, nil
	}, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.RatioToStale != nil || r.RatioToStaleMedian != nil || r.RatioToStaleMin != nil || r.RatioToStaleMax != nil {
			t.Errorf("without stale, %s has a ratio: %+v", r.Kind, r)
		}
	}
}

func TestPrintReadsByRound(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	var b strings.Builder
	PrintReads(&b, ReadsDoc{Callers: 16, Calls: 100, Rounds: 4, Kinds: []ReadKindRow{
		{Kind: "stale", CallsPerSecond: 1000},
		{Kind: "linearizable", CallsPerSecond: 700, RatioToStale: f(0.7), RatioToStaleMedian: f(0.68), RatioToStaleMin: f(0.6), RatioToStaleMax: f(0.9)},
	}})
	if !strings.Contains(b.String(), "0.68× (0.60 to 0.90)") {
		t.Errorf("the by-round median and range are not printed:\n%s", b.String())
	}
}

// readRounds runs the kinds in turn, the second round backwards, and
// files each run's time under its own kind and round: the ratios by
// round pair stale's run with the kind's run of the same round.
func TestReadRoundsFilesEachRunUnderItsKindAndRound(t *testing.T) {
	kinds := []string{"stale", "linearizable", "forwarded"}
	// Each kind's wall time in round 1 and round 2 (stale is hit by a
	// burst in round 2).
	times := map[string][]time.Duration{
		"stale":        {100 * time.Millisecond, 400 * time.Millisecond},
		"linearizable": {125 * time.Millisecond, 200 * time.Millisecond},
		"forwarded":    {200 * time.Millisecond, 300 * time.Millisecond},
	}
	var order []string
	seen := map[string]int{}
	var sizes []int
	run := func(kind string, n int) (time.Duration, time.Duration, time.Duration, error) {
		order = append(order, kind)
		sizes = append(sizes, n)
		w := times[kind][seen[kind]]
		seen[kind]++
		return w, w / 10, w / 20, nil
	}
	rows, err := readRounds(kinds, 2, 101, run, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"stale", "linearizable", "forwarded", "forwarded", "linearizable", "stale"}; !slices.Equal(order, want) {
		t.Errorf("order of the runs %q, want %q", order, want)
	}
	if want := []int{50, 50, 50, 51, 51, 51}; !slices.Equal(sizes, want) {
		t.Errorf("calls per run %v, want %v (the last round takes the rest)", sizes, want)
	}
	near := func(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-9 }
	for i, want := range []struct {
		seconds            float64
		sums               float64 // of the sums; 0: none
		median, least, top float64 // by round; 0: none
	}{
		{0.5, 0, 0, 0, 0},
		{0.325, 0.5 / 0.325, 1.4, 0.8, 2.0},
		{0.5, 1.0, (0.5 + 4.0/3) / 2, 0.5, 4.0 / 3},
	} {
		r := rows[i]
		if r.Kind != kinds[i] || r.Calls != 101 || math.Abs(r.Seconds-want.seconds) > 1e-9 {
			t.Errorf("row %d: %s, %d calls in %v s; want %s, 101 calls in %v s", i, r.Kind, r.Calls, r.Seconds, kinds[i], want.seconds)
		}
		if want.sums == 0 {
			if r.RatioToStale != nil || r.RatioToStaleMedian != nil || r.RatioToStaleMin != nil || r.RatioToStaleMax != nil {
				t.Errorf("stale's row has a ratio to itself: %+v", r)
			}
			continue
		}
		if !near(r.RatioToStale, want.sums) || !near(r.RatioToStaleMedian, want.median) || !near(r.RatioToStaleMin, want.least) || !near(r.RatioToStaleMax, want.top) {
			t.Errorf("%s: ratio of sums %v, by round %v (%v to %v); want %v, %v (%v to %v)", r.Kind, deref(r.RatioToStale), deref(r.RatioToStaleMedian), deref(r.RatioToStaleMin), deref(r.RatioToStaleMax), want.sums, want.median, want.least, want.top)
		}
	}
	// Rounds of no calls (more rounds than calls, which the command
	// refuses) give no ratio: only the round that made calls counts.
	rows, err = readRounds(kinds, 4, 2, func(kind string, n int) (time.Duration, time.Duration, time.Duration, error) {
		if n == 0 {
			return time.Millisecond, 0, 0, nil // starting the callers
		}
		return map[string]time.Duration{"stale": 100 * time.Millisecond, "linearizable": 200 * time.Millisecond, "forwarded": 400 * time.Millisecond}[kind], 0, 0, nil
	}, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if !near(rows[1].RatioToStaleMedian, 0.5) || !near(rows[1].RatioToStaleMin, 0.5) || !near(rows[1].RatioToStaleMax, 0.5) {
		t.Errorf("with three rounds of no calls: linearizable by round %v (%v to %v), want 0.5 from the one round of calls", deref(rows[1].RatioToStaleMedian), deref(rows[1].RatioToStaleMin), deref(rows[1].RatioToStaleMax))
	}
	// A failed run names its kind and round, and ends the rounds.
	calls := 0
	_, err = readRounds(kinds, 2, 4, func(kind string, n int) (time.Duration, time.Duration, time.Duration, error) {
		calls++
		if calls == 5 {
			return 0, 0, 0, errors.New("boom")
		}
		return time.Millisecond, 0, 0, nil
	}, func(string, ...any) {})
	if err == nil || !strings.Contains(err.Error(), "linearizable, round 2: boom") || calls != 5 {
		t.Errorf("a failed run: %v after %d runs; want it named linearizable, round 2, after 5", err, calls)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
