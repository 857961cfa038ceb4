package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/version"
)

// After the raise there is no way back (docs/upgrades.md, Downgrade): a
// binary that cannot read the cluster version refuses to start, and one
// running that applies it stops. No release of this tree reads less than
// the current build, so the next release N+1 is simulated: the current
// tree built with internal/version's format stamp (harness.BuildStamped),
// which reports one format level more. It needs no history and runs on a
// shallow clone too.

// nextRelease builds the simulated N+1 and returns it with what it says
// it is (baton version --json): the version naming the stamp, and the
// stamped level.
func nextRelease(t *testing.T) (harness.Binary, string, version.Format) {
	t.Helper()
	want := version.MaxFormat + 1
	b, took, err := harness.BuildStamped(uint32(want))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(b.Path, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", b.Path, err)
	}
	var v struct {
		Version string         `json:"version"`
		Format  version.Format `json:"format"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Format != want || !strings.HasSuffix(v.Version, fmt.Sprintf("format%d", want)) {
		t.Fatalf("the stamped build says %+v (%v), want format %d named in its version: %s", v, err, want, out)
	}
	t.Logf("N+1: the current tree stamped at %v, version %s (built in %v, cached for the run)", want, v.Version, took.Round(time.Second))
	return b, v.Version, want
}

// atNext waits until every master holds the cluster version next and
// cluster status shows each on the N+1 build.
func (r *run) atNext(ctx context.Context, nextVersion string, next version.Format) {
	r.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.c.WaitClusterFormat(wctx, uint32(next)); err != nil {
		r.t.Fatal(err)
	}
	r.status(ctx, "", func(st statusJSON) error {
		if st.ClusterFormat != uint32(next) {
			return fmt.Errorf("cluster_format %d, want %d", st.ClusterFormat, next)
		}
		for _, p := range st.Peers {
			if p.Version != nextVersion || p.MaxFormat != uint32(next) {
				return fmt.Errorf("%s shown as %q format %d, want %s format %d", p.ID, p.Version, p.MaxFormat, nextVersion, next)
			}
		}
		return nil
	})
}

// refused waits for master id, just started on the current build, to
// exit, and checks that it exited non-zero naming its own version and
// both format levels, in the words wantLog adds. It returns the line that
// says so.
func (r *run) refused(ctx context.Context, id string, next version.Format, wantLog ...string) string {
	r.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := r.c.WaitExit(wctx, id)
	log := r.c.CurrentLog(id)
	if err != nil {
		r.t.Fatalf("downgrade: %s, put on the current build at cluster version %d, neither refused to start nor stopped within a minute (it runs on a state it cannot read): %v\n%s", id, next, err, tail(log))
	}
	if code == 0 {
		r.t.Errorf("downgrade: %s on the current build after the raise exited 0", id)
	}
	want := append([]string{
		fmt.Sprintf("refusing to start %s (%s)", id, r.curVersion),
		fmt.Sprintf("the cluster version is %v", next),
		fmt.Sprintf("this binary (%v at most) cannot read", version.MaxFormat),
	}, wantLog...)
	for _, w := range want {
		if !strings.Contains(log, w) {
			r.t.Errorf("downgrade: %s's output lacks %q:\n%s", id, w, tail(log))
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "baton agent:") {
			return line
		}
	}
	r.t.Errorf("downgrade: %s exited %d without a \"baton agent:\" line:\n%s", id, code, tail(log))
	return ""
}

// appliedStop is what a master logs when it stops on a cluster version
// it applied (cluster.Node.Failed), not refused at its start.
const appliedStop = "stopping: the cluster version applied is one this binary cannot read"

// inFlight fails the test if procedure id has finished: it was to cross
// what just happened.
func (r *run) inFlight(ctx context.Context, id uint64, across string) {
	r.t.Helper()
	p, err := r.cl.Get(ctx, id)
	if err != nil {
		r.t.Fatalf("downgrade: procedure %d: %v", id, err)
	}
	if client.Terminal(p.GetState()) {
		r.t.Fatalf("downgrade: procedure %d finished (%s) before %s: nothing was in flight", id, p.GetState(), across)
	}
}

// TestDowngradeRefusedAfterRaise: three masters on N+1 raise the cluster
// version to N+1's level; one follower put back on the current build (N)
// refuses to start, naming both versions, while the other two serve and
// finish a procedure in flight; back on N+1 it rejoins.
func TestDowngradeRefusedAfterRaise(t *testing.T) {
	if testing.Short() {
		t.Skip("upgrade: builds the simulated next release; not in -short")
	}
	began := time.Now()
	next, nextVersion, nextFormat := nextRelease(t)
	r, ctx := newRun(t, next, next, 0, false)
	c := r.c
	r.atNext(ctx, nextVersion, nextFormat)

	long, err := r.sleep(ctx, 40, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.WaitLeader(ctx)
	down := c.Followers(leader)[0]
	if code := c.Term(down, time.Minute); code != 0 {
		t.Fatalf("downgrade: %s exited %d on SIGTERM", down, code)
	}
	c.RestartWith(down, harness.Binary{Path: nodeBin})
	said := r.refused(ctx, down, nextFormat)
	if strings.Contains(c.CurrentLog(down), appliedStop) {
		t.Errorf("downgrade: %s started and then stopped; its start check was to refuse it", down)
	}
	r.inFlight(ctx, long, down+"'s refusal")

	// The other two serve: new work and the long sleep finish.
	quick, err := r.sleep(ctx, 2, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r.waitAll(ctx, []uint64{quick, long}, 2*time.Minute)

	c.RestartWith(down, next)
	r.caughtUp(ctx, down)
	r.atNext(ctx, nextVersion, nextFormat)
	r.checkEffects(ctx)
	t.Logf("downgrade refused after the raise: %s on %s exited: %s; the other two finished %d procedures, one in flight throughout; back on N+1 it rejoined (%v)",
		down, r.curVersion, said, len(r.ackedIDs()), time.Since(began).Round(time.Second))
}

// TestOldBinaryStopsOnAppliedRaise: a master on the current build (N)
// whose local state predates the raise starts (its start check passes),
// then applies the raise from the leader's log and stops, naming both
// versions, as docs/upgrades.md says of a WAL that lost its tail. The
// stale state is the member's own data directory as it was before the
// raise, put back while it is stopped.
func TestOldBinaryStopsOnAppliedRaise(t *testing.T) {
	if testing.Short() {
		t.Skip("upgrade: builds the simulated next release; not in -short")
	}
	began := time.Now()
	next, nextVersion, nextFormat := nextRelease(t)
	cur := harness.Binary{Path: nodeBin}
	// The current build's cluster: the cluster version is N's level.
	r, ctx := newRun(t, cur, cur, 0, false)
	c := r.c
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitClusterFormat(wctx, uint32(version.MaxFormat)); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitLeader(ctx)
	down := c.Followers(leader)[0]
	if code := c.Term(down, time.Minute); code != 0 {
		t.Fatalf("%s exited %d on SIGTERM", down, code)
	}
	dataDir := c.Node(down).DataDir
	before := dataDir + ".before-raise"
	if err := os.CopyFS(before, os.DirFS(dataDir)); err != nil {
		t.Fatalf("keep %s's state before the raise: %v", down, err)
	}

	// A rolling upgrade to N+1, followers first: the last one raises
	// the cluster version.
	c.RestartWith(down, next)
	r.caughtUp(ctx, down)
	for _, id := range c.Followers(leader) {
		if id != down {
			r.restartMaster(ctx, id, next)
		}
	}
	r.restartMaster(ctx, leader, next)
	r.atNext(ctx, nextVersion, nextFormat)
	long, err := r.sleep(ctx, 40, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}

	// Its state rolled back to before the raise, on N: it starts, applies
	// the raise and stops.
	if code := c.Term(down, time.Minute); code != 0 {
		t.Fatalf("%s exited %d on SIGTERM", down, code)
	}
	after := dataDir + ".after-raise"
	if err := os.Rename(dataDir, after); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(before, dataDir); err != nil {
		t.Fatal(err)
	}
	c.RestartWith(down, cur)
	said := r.refused(ctx, down, nextFormat, appliedStop)
	r.inFlight(ctx, long, down+"'s stop")
	r.waitAll(ctx, []uint64{long}, 2*time.Minute)

	// The state it left holds the raise: N+1 runs on it.
	c.RestartWith(down, next)
	r.caughtUp(ctx, down)
	r.atNext(ctx, nextVersion, nextFormat)
	r.checkEffects(ctx)
	t.Logf("a master on %s with its state from before the raise started, applied %v and stopped: %s; back on N+1 it rejoined (%v)",
		r.curVersion, nextFormat, said, time.Since(began).Round(time.Second))
}

// TestBadFormatStampRefused: a test build whose stamp does not raise the
// ceiling (here 1, below this tree's level) is not the build its maker
// meant: a master or a region server of it exits 1 naming the stamp before
// it starts anything, rather than report itself as something it is not.
func TestBadFormatStampRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("upgrade: builds the tree; not in -short")
	}
	b, _, err := harness.BuildStamped(uint32(version.Format1))
	if err != nil {
		t.Fatal(err)
	}
	ports := harness.FreePorts(t, 1)
	for name, args := range map[string][]string{
		"agent":        {"agent", "--dev", "--data-dir", t.TempDir()},
		"regionserver": {"regionserver", "--id", "rs1", "--masters", ports[0], "--insecure", "--grpc-addr", ports[0]},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, b.Path, args...).CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s with format stamp 1: %v, want exit 1\n%s", name, err, tail(string(out)))
			continue
		}
		if want := `format stamp "1" is not above this tree's`; !strings.Contains(string(out), want) {
			t.Errorf("%s with format stamp 1 says %q, want it to name the stamp (%q)", name, tail(string(out)), want)
		}
	}
}
