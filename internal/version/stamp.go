package version

import (
	"fmt"
	"strconv"
	"strings"
)

// testFormatStamp is a test hook, set only at link time:
//
//	go build -ldflags "-X github.com/baton-dev/baton/internal/version.testFormatStamp=3" ./cmd/node
//
// makes a binary of this tree that says it writes and reads up to format 3:
// the next release N+1 as far as the cluster version goes, so that a real
// cluster can be raised above what a plain build of this tree reads, and
// the refusal of that plain build proven with real processes
// (integration/upgrade). Nothing at the stamped level is written: no
// writer knows it. A plain build leaves it empty and nothing changes.
var testFormatStamp string

// stampedFormat is the level testFormatStamp raises the ceiling to, 0 when
// there is no stamp or a bad one (stampErr says why).
var stampedFormat, stampErr = parseFormatStamp(testFormatStamp)

// maxStampedFormat bounds a stamp: a level so far above this tree's is a
// typo, not a release.
const maxStampedFormat = 1000

// parseFormatStamp reads a link-time stamp. It can only raise the ceiling:
// a stamp at or below MaxFormat would make a binary that claims to read
// less than it does (or nothing new), and is refused, as is one that is no
// number.
func parseFormatStamp(s string) (Format, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	switch {
	case err != nil:
		return 0, fmt.Errorf("version: the test build's format stamp %q is not a format level: %w", s, err)
	case Format(n) <= MaxFormat:
		return 0, fmt.Errorf("version: the test build's format stamp %q is not above this tree's %v: a stamp only raises the ceiling", s, MaxFormat)
	case n > maxStampedFormat:
		return 0, fmt.Errorf("version: the test build's format stamp %q is above %d", s, maxStampedFormat)
	}
	return Format(n), nil
}

// Ceiling is the highest level this binary writes and reads, what it
// reports to the other masters and checks the cluster version against:
// MaxFormat, or a test build's stamp above it (testFormatStamp). Code that
// asks what this tree knows uses MaxFormat; code that asks what this
// binary says it is uses Ceiling (Current).
func Ceiling() Format {
	if stampedFormat != 0 {
		return stampedFormat
	}
	return MaxFormat
}

// StampErr is why the link-time format stamp is refused, nil for a plain
// build or a good stamp. A binary with a refused stamp runs at MaxFormat;
// the agent refuses to start with this error, since the build is not what
// its maker meant.
func StampErr() error { return stampErr }

// StampVersion is version v as a stamped test build says it: with build
// metadata naming the stamped level ("0.2.0-dev+format3"), so that the
// other masters' reports, `cluster status` and every message name it apart
// from a plain build of the same tree. v itself for a plain build.
func StampVersion(v string) string {
	if stampedFormat == 0 {
		return v
	}
	sep := "+"
	if strings.Contains(v, "+") {
		sep = "."
	}
	return fmt.Sprintf("%s%sformat%d", v, sep, uint32(stampedFormat))
}
