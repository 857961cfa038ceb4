package benchstat

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{0.9, 0.7}, 0.8},
		{[]float64{0.9, 0.66, 0.84}, 0.84},
		{[]float64{1, 0.5, 0.8, 0.7}, 0.75},
	} {
		in := slices.Clone(tc.v)
		if got := Median(tc.v); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.want)
		}
		if !slices.Equal(in, tc.v) {
			t.Errorf("Median reordered its argument: %v, was %v", tc.v, in)
		}
	}
}

func TestSummarize(t *testing.T) {
	got := Summarize([]float64{0.9, 0.66, 0.84, 0.7})
	want := Summary{Median: 0.77, Min: 0.66, Max: 0.9, N: 4}
	if math.Abs(got.Median-want.Median) > 1e-9 || got.Min != want.Min || got.Max != want.Max || got.N != want.N {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if (Summarize(nil) != Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want the zero Summary", Summarize(nil))
	}
}

// Each round's ratio is taken between the kinds' runs of that round: a
// slow round of the base (the machine busy elsewhere) gives a high ratio
// in that round only, where the ratio of the sums would carry it into the
// whole figure.
func TestRatiosByRound(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	took := [][]time.Duration{
		ms(100, 125, 200), // 0.8, 0.5
		ms(400, 200, 400), // 2.0, 1.0: the base hit by a burst
		ms(100, 140, 250), // 0.714, 0.4
	}
	got := RatiosByRound(took, 0)
	want := [][]float64{nil, {0.8, 2.0, 100.0 / 140}, {0.5, 1.0, 0.4}}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("kind %d: ratios %v, want %v", i, got[i], want[i])
		}
		for r := range want[i] {
			if math.Abs(got[i][r]-want[i][r]) > 1e-9 {
				t.Errorf("kind %d, round %d: ratio %v, want %v", i, r+1, got[i][r], want[i][r])
			}
		}
	}
	// A round without a time of both is passed over, not divided by.
	got = RatiosByRound([][]time.Duration{ms(0, 0, 0), ms(100, 200, 400)}, 0)
	if len(got[1]) != 1 || got[1][0] != 0.5 || len(got[2]) != 1 || got[2][0] != 0.25 {
		t.Errorf("with a round of no time: %v, want [[] [0.5] [0.25]]", got)
	}
	// Another base: the ratios are over its times.
	if got := RatiosByRound([][]time.Duration{ms(100, 200)}, 1); got[1] != nil || len(got[0]) != 1 || got[0][0] != 2 {
		t.Errorf("base 1: %v, want [[2] []]", got)
	}
}

// Alternate runs the kinds in turn, every other round backwards, files
// each time under its kind and round, and stops at the first error.
func TestAlternate(t *testing.T) {
	var order []int
	took, err := Alternate(3, 3, func(k, r int) (time.Duration, error) {
		order = append(order, k)
		return time.Duration(10*r + k), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 2, 1, 0, 0, 1, 2}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	for r, round := range took {
		for k, d := range round {
			if d != time.Duration(10*r+k) {
				t.Errorf("round %d, kind %d: %v filed, want %v", r, k, d, time.Duration(10*r+k))
			}
		}
	}
	runs := 0
	took, err = Alternate(2, 3, func(k, r int) (time.Duration, error) {
		if runs++; runs == 4 {
			return 0, errors.New("boom")
		}
		return time.Millisecond, nil
	})
	if err == nil || runs != 4 || len(took) != 1 {
		t.Errorf("a failed run: %v after %d runs, %d whole rounds; want boom after 4, 1 round", err, runs, len(took))
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ total, rounds int }{{10, 3}, {64000, 16}, {2, 4}, {7, 1}} {
		sum := 0
		for r := range tc.rounds {
			n := Split(tc.total, tc.rounds, r)
			if r < tc.rounds-1 && n != tc.total/tc.rounds {
				t.Errorf("Split(%d, %d, %d) = %d, want an equal share %d", tc.total, tc.rounds, r, n, tc.total/tc.rounds)
			}
			sum += n
		}
		if sum != tc.total {
			t.Errorf("%d calls over %d rounds add up to %d", tc.total, tc.rounds, sum)
		}
	}
}

// reported is a ReportMetric that keeps what it was given.
type reported map[string]float64

func (r reported) ReportMetric(n float64, unit string) { r[unit] = n }

func TestSummaryReport(t *testing.T) {
	got := reported{}
	Summarize([]float64{0.9, 0.7, 1.1}).Report(got, "a/b")
	if got["a/b-median"] != 0.9 || got["a/b-min"] != 0.7 || got["a/b-max"] != 1.1 || len(got) != 3 {
		t.Fatalf("reported %v", got)
	}
}
