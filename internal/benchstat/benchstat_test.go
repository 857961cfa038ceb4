package benchstat

import (
	"math"
	"slices"
	"testing"
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
