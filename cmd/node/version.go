package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"

	semver "github.com/baton-dev/baton/internal/version"
)

// version and commit are set at link time (make build:
// -ldflags "-X main.version=... -X main.commit=..."). A plain go build says
// the release line's pre-release (semver.Dev, "0.2.0-dev"), and takes the
// commit from what the go command stamped into the binary, if it did
// (-buildvcs).
var (
	version = ""
	commit  = ""
)

// buildInfo is what `baton version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	// Format and MinFormat are the highest format level this binary
	// writes and reads and the oldest it reads (semver.Ceiling, which is
	// semver.MaxFormat but for a stamped test build, and
	// semver.MinFormat).
	Format    semver.Format `json:"format"`
	MinFormat semver.Format `json:"min_format"`
}

// readBuildInfo takes the commit from the link-time flag, else from what
// the go command stamped into the binary (vcs.revision, vcs.modified);
// "unknown" when neither says. A test build with a format stamp says so in
// its version (semver.StampVersion).
func readBuildInfo() buildInfo {
	b := readLinkedBuildInfo()
	b.Version = semver.StampVersion(b.Version)
	return b
}

func readLinkedBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: "unknown", GoVersion: runtime.Version(),
		Format: semver.Ceiling(), MinFormat: semver.MinFormat}
	if b.Version == "" {
		b.Version = semver.Dev
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	if commit != "" {
		b.Commit, b.Modified = commit, false
	}
	if version == "" && taggedModuleVersion(info.Main.Version) {
		b.Version = info.Main.Version
	}
	return b
}

// pseudoVersion is the tail the go command gives a module version made up
// from a commit that no tag names (v0.0.0-20261128225818-a2aa0cb86033),
// before any +dirty.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}(\+.*)?$`)

// taggedModuleVersion says whether v, the version the go command stamped
// on the main module, names a release: a tag, not "(devel)" and not a
// pseudo-version. The go command of Go 1.24 and later stamps a
// pseudo-version on a plain build of a clean checkout; taken for the
// binary's version, it made the release line 0.0 and upgrade-check called
// the member too old.
func taggedModuleVersion(v string) bool {
	return v != "" && v != "(devel)" && !pseudoVersion.MatchString(v)
}

func init() {
	topLevel.add(topCommand{
		name: "version", aliases: []string{"--version"}, rank: 180, run: (*cli).version,
		summary: `print the version, the commit it was built from and the Go version`,
	})
}

func (c *cli) version(args []string) int {
	asJSON := false
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		case "-h", "--help":
			fmt.Fprint(c.stdout, "usage: baton version [--json]\n\nprints the version, the commit it was built from and the Go version\n")
			return 0
		default:
			fmt.Fprintf(c.stderr, "baton version: unexpected argument %q\nusage: baton version [--json]\n", a)
			return 2
		}
	}
	b := readBuildInfo()
	if asJSON {
		out, _ := json.MarshalIndent(b, "", "  ")
		fmt.Fprintf(c.stdout, "%s\n", out)
		return 0
	}
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(c.stdout, "baton %s\ncommit %s\n%s\n", b.Version, commit, b.GoVersion)
	return 0
}
