package main

import (
	"strconv"
	"strings"
	"time"
)

// The parsing and applying that the agent's flag groups share: a flag's
// raw value (flag, environment or config file, as a string) checked
// against its bounds, each problem named through bad.

// intFlag parses the value v of flag --name (trimmed) as a whole number in
// lo..hi, what naming it in the complaint otherwise (e.g. "a number of
// connections"); given is false when v is empty. The number is returned
// even when out of range: bad has refused the configuration.
func intFlag(name, v, what string, lo, hi int, bad func(string, ...any)) (n int, given bool) {
	if v = strings.TrimSpace(v); v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		bad("--%s %q: want %s in %d..%d", name, v, what, lo, hi)
	}
	return n, true
}

// durationFlag parses the value v of flag --name (trimmed) as a duration
// in lo..hi, example (e.g. "10s") showing one in the complaint otherwise.
// ok is false when v is empty or refused.
func durationFlag(name, v string, lo, hi time.Duration, example string, bad func(string, ...any)) (d time.Duration, ok bool) {
	if v = strings.TrimSpace(v); v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		bad("--%s %q: want a duration in %s..%v, e.g. %s", name, v, lowerBound(lo), hi, example)
		return 0, false
	}
	return d, true
}

// lowerBound is lo as a complaint names it: a bare 0 reads as "none at
// all" where 0s would read as a unit to type.
func lowerBound(lo time.Duration) string {
	if lo == 0 {
		return "0"
	}
	return lo.String()
}

// override sets *field to v if v was given (positive): a flag not given
// leaves cluster's default in place.
func override[T int | uint64 | time.Duration](field *T, v T) {
	if v > 0 {
		*field = v
	}
}
