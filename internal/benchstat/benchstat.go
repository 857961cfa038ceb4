// Package benchstat runs a benchmark's kinds in alternating rounds and
// summarises them. A ratio taken once, or from the sums of all rounds, is
// one moment of a shared machine (a slow fsync, a neighbour's burst lands
// in one round and moves it); the median of each round's own ratio, with
// its spread, says where the ratio sits and how far the machine moved it.
package benchstat

import (
	"slices"
	"time"
)

// Median of v: the middle value, or the mean of the two middle ones; 0
// for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Summary is a figure's median over rounds and its spread.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// Summarize is v's median, least and greatest: the zero Summary for none.
func Summarize(v []float64) Summary {
	if len(v) == 0 {
		return Summary{}
	}
	return Summary{Median: Median(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v)}
}

// Report reports s as b's metrics unit-median, unit-min and unit-max (a
// *testing.B's ReportMetric).
func (s Summary) Report(b interface{ ReportMetric(n float64, unit string) }, unit string) {
	b.ReportMetric(s.Median, unit+"-median")
	b.ReportMetric(s.Min, unit+"-min")
	b.ReportMetric(s.Max, unit+"-max")
}

// Split is how many of total calls round r of rounds makes: an equal
// share, the last round the rest. A round of none (more rounds than
// calls) should report no time, which RatiosByRound passes over.
func Split(total, rounds, r int) int {
	if r == rounds-1 {
		return total - total/rounds*(rounds-1)
	}
	return total / rounds
}

// Alternate runs kinds kinds (0 to kinds-1) in turn, rounds times, every
// other round in reverse order, so that no kind always runs first, on
// what the last round left, nor pays for the same neighbour every round.
// It returns each round's time of each kind as run measured it
// (took[round][kind]), and stops at run's first error.
func Alternate(kinds, rounds int, run func(kind, round int) (time.Duration, error)) ([][]time.Duration, error) {
	took := make([][]time.Duration, 0, rounds)
	for r := range rounds {
		t := make([]time.Duration, kinds)
		for i := range kinds {
			k := i
			if r%2 == 1 {
				k = kinds - 1 - i
			}
			d, err := run(k, r)
			if err != nil {
				return took, err
			}
			t[k] = d
		}
		took = append(took, t)
	}
	return took, nil
}

// RatiosByRound is, for each kind but base, base's time over its own in
// each round of took: its rate over base's, where both made the same
// calls in that round. A round without a time of both is passed over
// rather than divided by; base's own is nil.
func RatiosByRound(took [][]time.Duration, base int) [][]float64 {
	if len(took) == 0 {
		return nil
	}
	out := make([][]float64, len(took[0]))
	for _, round := range took {
		for k := range round {
			if k != base && round[k] > 0 && round[base] > 0 {
				out[k] = append(out[k], round[base].Seconds()/round[k].Seconds())
			}
		}
	}
	return out
}
