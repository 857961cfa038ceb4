// Package benchstat summarises a benchmark's repeated rounds. A ratio
// taken once, or from the sums of all rounds, is one moment of a shared
// machine (a slow fsync, a neighbour's burst lands in one round and
// moves it); the median of each round's own ratio, with its spread, says
// where the ratio sits and how far the machine moved it.
package benchstat

import "slices"

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
