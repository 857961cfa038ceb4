package version

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Line is a release line: the major and minor numbers of a semantic
// version. The upgrade policy counts in lines (N−1 → N): a patch release
// changes no format, and a pre-release or a build's metadata ("0.2.0-dev",
// "v0.2.1-0.2026…-abc" from a module build) belongs to its line.
type Line struct{ Major, Minor int }

// ParseLine reads the line of a version as `baton version` prints it,
// with or without a leading "v".
func ParseLine(v string) (Line, error) {
	s := strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Line{}, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return Line{}, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", v)
		}
		n[i] = x
	}
	return Line{Major: n[0], Minor: n[1]}, nil
}

// CurrentLine is the line of Release, this tree's.
func CurrentLine() Line {
	l, err := ParseLine(Release)
	if err != nil {
		panic(err) // Release is a constant: a test catches this
	}
	return l
}

func (l Line) String() string { return fmt.Sprintf("%d.%d", l.Major, l.Minor) }

// Compare orders lines: -1 if l is older than o, 0 if the same, +1 if newer.
func (l Line) Compare(o Line) int {
	if c := cmp.Compare(l.Major, o.Major); c != 0 {
		return c
	}
	return cmp.Compare(l.Minor, o.Minor)
}

// Previous is N−1, the oldest line a rolling upgrade to l starts from,
// and the line a downgrade from l may go back to. The line before a new
// major's first (1.0) is not known from the numbers: any line of the
// major before counts, so Previous is that major's 0 and everything of it
// compares at least as new.
func (l Line) Previous() Line {
	switch {
	case l.Minor > 0:
		return Line{l.Major, l.Minor - 1}
	case l.Major > 0:
		return Line{l.Major - 1, 0}
	}
	return l
}
