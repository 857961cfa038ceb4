package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Each round's ratio is taken between the kinds' runs of that round: a
// slow round of stale (the machine busy elsewhere) gives a high ratio in
// that round only, where the ratio of the sums would carry it into the
// whole figure.
func TestRatiosToStaleByRound(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	kinds := []string{"stale", "linearizable", "forwarded"}
	took := [][]time.Duration{
		ms(100, 125, 200), // 0.8, 0.5
		ms(400, 200, 400), // 2.0, 1.0: stale hit by a burst
		ms(100, 140, 250), // 0.714, 0.4
	}
	got := ratiosToStaleByRound(kinds, took)
	want := [][]float64{nil, {0.8, 2.0, 100.0 / 140}, {0.5, 1.0, 0.4}}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("kind %s: ratios %v, want %v", kinds[i], got[i], want[i])
		}
		for r := range want[i] {
			if math.Abs(got[i][r]-want[i][r]) > 1e-9 {
				t.Errorf("kind %s, round %d: ratio %v, want %v", kinds[i], r+1, got[i][r], want[i][r])
			}
		}
	}
	// A round a kind made no calls in (the count split over more rounds
	// than calls) says nothing.
	got = ratiosToStaleByRound(kinds, [][]time.Duration{ms(0, 0, 0), ms(100, 200, 400)})
	if len(got[1]) != 1 || got[1][0] != 0.5 || len(got[2]) != 1 || got[2][0] != 0.25 {
		t.Errorf("with an empty round: %v, want [[] [0.5] [0.25]]", got)
	}
	// Without stale there is nothing to compare with.
	for i, v := range ratiosToStaleByRound([]string{"linearizable", "forwarded"}, [][]time.Duration{ms(100, 200)}) {
		if v != nil {
			t.Errorf("without stale, kind %d: %v, want none", i, v)
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
