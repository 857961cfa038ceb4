// Package version says which release a binary is and which formats it
// writes and reads, and encodes what masters tell each other of that: a
// member's report (what its binary is) and the cluster version (the format
// every member can read, which the leader commits). It sits on floor 0 so
// that every package that writes something an older release would misread
// can ask, through a Gate, whether the cluster allows it yet.
//
// A format level names a set of things written to disk or sent across the
// network. Level 1 is everything 0.1.0 reads and writes; each later level
// adds what one release introduced. A binary writes up to MaxFormat and
// reads back to MinFormat. The cluster version is the lowest MaxFormat of
// the members, raised by the leader when the last member reports a higher
// one, never lowered (etcd's cluster version): until it reaches a level, no
// member writes what that level introduced, so a member not yet upgraded
// never meets it.
package version

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Release is the release line this tree builds, a semantic version.
// Commit fa4612c is 0.1.0; this line is the first to say what it is.
const Release = "0.2.0"

// Dev is the version a binary says it is when nothing set one at link
// time: a pre-release of the line it builds, which semantic versioning
// orders before the release itself.
const Dev = Release + "-dev"

// Format is a format level: what a binary can write and read.
type Format uint32

const (
	// Format1 is everything 0.1.0 writes and reads; also the level of a
	// member that never reported one (a 0.1.0 binary sends none).
	Format1 Format = 1
	// Format2 is what 0.2.0 adds that 0.1.0 misreads: ACL revocations
	// (acl/revoked/), token expiry (expires_ms), token uses
	// (acl/tokenuse/), the node mark nodes/<id>/removed, the cluster id
	// (cluster/id), procedure record fields 113 (child summaries) and
	// 114 (submitter), CreateTable's state version 2 (its
	// PRE_OPERATION writes the layout, which 0.1.0 would not undo),
	// audit record groups (audit/<term>-<first>+<last>, which 0.1.0
	// would read as one empty record; their records as what they do not
	// share with the group's common fields), and audit records that keep
	// their request (field 18) in place of args, which 0.1.0 would list
	// without args.
	// (nodes/<id>/admin_addr_proven, which 0.1.0 never reads, is written
	// at every level: the raise itself needs it, docs/upgrades.md. So are
	// a region server's version and max_format in its server/<id> record,
	// which 0.1.0 skips: upgrade-check needs them before the raise.)
	Format2 Format = 2
)

// MaxFormat is the highest level this binary writes and reads; MinFormat
// the oldest it reads.
const (
	MaxFormat = Format2
	MinFormat = Format1
)

// introduced is the release that introduced each level, by level.
var introduced = []string{Format1: "0.1.0", Format2: "0.2.0"}

// IntroducedIn returns the release that introduced f, and false for a
// level this binary does not know (a newer binary's, or 0).
func IntroducedIn(f Format) (string, bool) {
	if f == 0 || int(f) >= len(introduced) {
		return "", false
	}
	return introduced[f], true
}

// String names f with its release, for messages: "format 2 (0.2.0)", or
// "format 7 (a release newer than this binary)".
func (f Format) String() string {
	if r, ok := IntroducedIn(f); ok {
		return fmt.Sprintf("format %d (%s)", uint32(f), r)
	}
	if f > MaxFormat && f <= Ceiling() {
		return fmt.Sprintf("format %d (this test build's stamp)", uint32(f))
	}
	if f > MaxFormat {
		return fmt.Sprintf("format %d (a release newer than %s)", uint32(f), Release)
	}
	return fmt.Sprintf("format %d (not a format)", uint32(f))
}

// Build is what a binary is, as a member reports it.
type Build struct {
	// Version is the binary's version, as `baton version` prints it.
	Version string
	// MaxFormat is the highest level it writes and reads.
	MaxFormat Format
}

// Current is this binary's build with version as its version string
// (Dev if empty, as a stamped test build says it: StampVersion). Its
// MaxFormat is Ceiling: MaxFormat but for a stamped test build.
func Current(version string) Build {
	if version == "" {
		version = StampVersion(Dev)
	}
	return Build{Version: version, MaxFormat: Ceiling()}
}

// Unreported is the build a member that has no report counts as: a 0.1.0
// binary, which sends none.
var Unreported = Build{Version: "0.1.0", MaxFormat: Format1}

// Counted is the level b counts as where the leader takes the lowest over
// the members: its MaxFormat, or Unreported's when it says none (0: a
// 0.1.0 binary, which reports nothing and answers without a level; a
// report that could not be read). The one rule for a report, a pending
// report and an answer alike.
func (b Build) Counted() Format {
	if b.MaxFormat == 0 {
		return Unreported.MaxFormat
	}
	return b.MaxFormat
}

// Gate reads the committed cluster version. The packages that write
// something a level introduced take one and write it only when
// Allows(level); cluster.Node.ClusterFormat is one.
type Gate func() Format

// Allows reports whether the cluster version has reached f, so that every
// member reads what f introduced. A nil Gate allows Format1 only: not
// knowing the cluster version is knowing nothing newer is safe.
func (g Gate) Allows(f Format) bool {
	if g == nil {
		return f <= Format1
	}
	return g() >= f
}

// Newest is the Gate of a process whose writes no older binary reads (a
// standalone executor's store, a test's): it allows this binary's
// MaxFormat.
func Newest() Format { return MaxFormat }

// ErrBadRecord is wrapped by the errors of DecodeReport and
// DecodeClusterFormat for a value they cannot trust.
var ErrBadRecord = errors.New("version: bad record")

// recordV1 is the version of the report and cluster version records this
// package writes. A later layout is a new key, not a new record version
// under the same one (what 0.2.0 reads there must stay what it wrote).
const recordV1 = 1

// report is a member's report as stored ("nodes/<id>/version").
type report struct {
	Record    int    `json:"record"`
	Version   string `json:"version"`
	MaxFormat Format `json:"max_format"`
}

// EncodeReport is b as a member's stored report.
func EncodeReport(b Build) []byte {
	out, _ := json.Marshal(report{Record: recordV1, Version: b.Version, MaxFormat: b.MaxFormat})
	return out
}

// DecodeReport reads a stored report. A level this binary does not know
// is kept (a newer member's); a record it cannot read, of another record
// version or with no level, is an error wrapping ErrBadRecord, and the
// member is best counted as Unreported.
func DecodeReport(data []byte) (Build, error) {
	var r report
	if err := json.Unmarshal(data, &r); err != nil {
		return Build{}, fmt.Errorf("%w: report %q: %v", ErrBadRecord, clip(data), err)
	}
	if r.Record != recordV1 || r.MaxFormat == 0 {
		return Build{}, fmt.Errorf("%w: report %q: record %d, max_format %d", ErrBadRecord, clip(data), r.Record, r.MaxFormat)
	}
	return Build{Version: r.Version, MaxFormat: r.MaxFormat}, nil
}

// clusterFormat is the committed cluster version as stored
// ("cluster/format").
type clusterFormat struct {
	Record int    `json:"record"`
	Format Format `json:"format"`
}

// EncodeClusterFormat is f as the committed cluster version.
func EncodeClusterFormat(f Format) []byte {
	out, _ := json.Marshal(clusterFormat{Record: recordV1, Format: f})
	return out
}

// DecodeClusterFormat reads the committed cluster version; an error wraps
// ErrBadRecord.
func DecodeClusterFormat(data []byte) (Format, error) {
	var c clusterFormat
	if err := json.Unmarshal(data, &c); err != nil {
		return 0, fmt.Errorf("%w: cluster format %q: %v", ErrBadRecord, clip(data), err)
	}
	if c.Record != recordV1 || c.Format == 0 {
		return 0, fmt.Errorf("%w: cluster format %q: record %d, format %d", ErrBadRecord, clip(data), c.Record, c.Format)
	}
	return c.Format, nil
}

// Next is the cluster version the leader commits: the lowest of the
// members' levels, or committed if that is higher. It is never lowered: a
// member may have written what committed introduced, which a member that
// cannot read it must not be the one to undo.
func Next(committed Format, members []Format) Format {
	if len(members) == 0 {
		return committed
	}
	low := members[0]
	for _, f := range members[1:] {
		low = min(low, f)
	}
	return max(committed, low)
}

// CheckReadable returns nil if a binary whose highest level is most can
// read a cluster at committed, else an error naming both.
func CheckReadable(committed, most Format) error {
	if committed <= most {
		return nil
	}
	need := "a newer binary"
	if r, ok := IntroducedIn(committed); ok {
		need = "a binary of " + r + " or later"
	}
	return fmt.Errorf("version: the cluster version is %v, which this binary (%v at most) cannot read: run %s", committed, most, need)
}

// clip bounds a value quoted in an error.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
