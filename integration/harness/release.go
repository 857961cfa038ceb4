package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Release is a released version of Baton that the upgrade tests build from
// the repository's history.
type Release struct {
	Version string
	Commit  string // full hash: a short one may become ambiguous
}

// Releases are the released versions, oldest first. Releasing a version
// adds its line here; the upgrade tests then build it and run every
// rolling upgrade from it to the current tree.
var Releases = []Release{
	{"0.1.0", "fa4612c4b9565f18975920e00003dffdaf67c64c"},
}

// Binary is a baton binary and what it was built from: Release is the
// version for a binary built by BuildRelease, "" for the current tree's
// (Build). The harness gives a released binary only the flags it knows
// (see agentArgs).
type Binary struct {
	Path    string
	Release string
}

func (b Binary) String() string {
	if b.Release == "" {
		return "current (" + b.Path + ")"
	}
	return b.Release + " (" + b.Path + ")"
}

// ErrNoHistory is returned by BuildRelease when the repository does not
// hold the release's commit (a shallow clone, or no git at all): the
// caller skips, saying so.
var ErrNoHistory = errors.New("harness: the release's commit is not in this repository's history")

// buildDir is where RunWithBinary builds; BuildRelease puts its binaries
// there too, so they go with the run.
var buildDir struct {
	sync.Mutex
	path  string
	built map[string]*releaseBuild // by commit
}

type releaseBuild struct {
	once sync.Once
	bin  Binary
	took time.Duration
	err  error
}

// BuildRelease builds release r's baton binary, once per test binary run
// (later calls, from any test, wait for the first and get its result). It
// checks r's commit out into a temporary git worktree, builds cmd/node
// there with CGO_ENABLED=0, and removes the worktree. The binary goes into
// the run's build directory (RunWithBinary; a new temporary directory,
// left behind, for a caller outside it). It returns an
// error wrapping ErrNoHistory when the commit is not there to check out.
func BuildRelease(r Release) (Binary, time.Duration, error) {
	return buildOnce(r.Commit, func(dir string) (Binary, error) { return buildRelease(dir, r) })
}

// buildOnce runs build once per test binary run for key (a commit, or a
// stamped build's name), with the run's build directory ("" outside
// RunWithBinary); later calls wait for the first and get its result.
func buildOnce(key string, build func(dir string) (Binary, error)) (Binary, time.Duration, error) {
	buildDir.Lock()
	if buildDir.built == nil {
		buildDir.built = map[string]*releaseBuild{}
	}
	rb := buildDir.built[key]
	if rb == nil {
		rb = &releaseBuild{}
		buildDir.built[key] = rb
	}
	dir := buildDir.path
	buildDir.Unlock()
	rb.once.Do(func() {
		start := time.Now()
		rb.bin, rb.err = build(dir)
		rb.took = time.Since(start)
	})
	return rb.bin, rb.took, rb.err
}

// stampVar is internal/version's link-time test hook: a format level above
// this tree's MaxFormat that a test build says it writes and reads.
const stampVar = "github.com/baton-dev/baton/internal/version.testFormatStamp"

// BuildStamped builds the current tree as the next release would look to
// the cluster version: with internal/version's format stamp at format, so
// that it reports format as its MaxFormat (and a version naming it,
// "0.2.0-dev+format3"). A cluster of it raises the cluster version above
// what the current build reads, which then must refuse to start on it
// (docs/upgrades.md). It needs no history, only the tree; built once per
// test binary run (under the race detector if BATON_NODE_RACE is set, as
// the current build is), into the run's build directory. The binary
// counts as the current tree's for its flags (Release "").
func BuildStamped(format uint32) (Binary, time.Duration, error) {
	name := fmt.Sprintf("baton-format%d", format)
	return buildOnce("stamped:"+name, func(dir string) (Binary, error) {
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "baton-stamped-bin-"); err != nil {
				return Binary{}, err
			}
		}
		bin := filepath.Join(dir, name)
		args := []string{"build", "-o", bin, "-ldflags", fmt.Sprintf("-X %s=%d", stampVar, format)}
		if os.Getenv("BATON_NODE_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, "github.com/baton-dev/baton/cmd/node")
		cmd := exec.Command("go", args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return Binary{}, fmt.Errorf("harness: go %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		// Processes may run under uids of their own (Options.UIDBase).
		if err := os.Chmod(dir, 0o755); err != nil {
			return Binary{}, err
		}
		return Binary{Path: bin}, nil
	})
}

func buildRelease(dir string, r Release) (Binary, error) {
	root, err := gitOut("", "rev-parse", "--show-toplevel")
	if err != nil {
		return Binary{}, fmt.Errorf("%w: not in a git checkout (%v)", ErrNoHistory, err)
	}
	if _, err := gitOut(root, "cat-file", "-e", r.Commit+"^{commit}"); err != nil {
		shallow, _ := gitOut(root, "rev-parse", "--is-shallow-repository")
		return Binary{}, fmt.Errorf("%w: %s (%s) is missing (shallow clone: %s; `git fetch --unshallow` brings it)",
			ErrNoHistory, r.Version, r.Commit, shallow)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "baton-release-bin-"); err != nil {
			return Binary{}, err
		}
	}
	bin := filepath.Join(dir, "baton-"+r.Version+"-"+r.Commit[:12])
	tree, err := os.MkdirTemp("", "baton-release-src-")
	if err != nil {
		return Binary{}, err
	}
	// git worktree add wants to make the directory itself.
	if err := os.Remove(tree); err != nil {
		return Binary{}, err
	}
	if _, err := gitOut(root, "worktree", "add", "--detach", tree, r.Commit); err != nil {
		return Binary{}, fmt.Errorf("harness: check %s out: %w", r.Version, err)
	}
	defer func() {
		if _, err := gitOut(root, "worktree", "remove", "--force", tree); err != nil {
			os.RemoveAll(tree)
			_, _ = gitOut(root, "worktree", "prune")
		}
	}()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/node")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Binary{}, fmt.Errorf("harness: build %s (%s): %v\n%s", r.Version, r.Commit, err, out.String())
	}
	// Processes may run under uids of their own (Options.UIDBase).
	if err := os.Chmod(dir, 0o755); err != nil {
		return Binary{}, err
	}
	return Binary{Path: bin, Release: r.Version}, nil
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
