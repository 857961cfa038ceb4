package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// The cluster version across the upgrade (issue 30, item 2, as
// docs/upgrades.md's policy runs it): upgrade-check before each master's
// restart, cluster status after it, the cluster version sampled
// throughout, and the raise once the last master runs the current build.

// currentVersion is what the current build says it is (baton version):
// what each upgraded member must report.
func currentVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(nodeBin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("baton version: %v", err)
	}
	var v struct {
		Version string `json:"version"`
		Format  uint32 `json:"format"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" || v.Format != uint32(version.MaxFormat) {
		t.Fatalf("baton version --json: %+v, %v: %s", v, err, out)
	}
	return v.Version
}

// cli runs the current build's baton with args against the whole cluster,
// as an operator would, and returns its exit code, stdout and stderr.
func (r *run) cli(ctx context.Context, args ...string) (int, string, string) {
	r.t.Helper()
	if !slices.Contains(args, "--addr") {
		args = append(args, "--addr", strings.Join(r.c.AdminAddrs(), ","))
	}
	args = append(args, r.cliTLS...)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, nodeBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee) && cctx.Err() == nil:
		return ee.ExitCode(), out.String(), errb.String()
	}
	r.t.Fatalf("upgrade: baton %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	return 0, "", ""
}

// checkDoc is `baton cluster upgrade-check --json`, the keys this test
// reads.
type checkDoc struct {
	Safe   bool   `json:"safe"`
	Member string `json:"member"`
	Checks []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
	AnsweredBy    string `json:"answered_by"`
	LeaderID      string `json:"leader_id"`
	ClusterFormat uint32 `json:"cluster_format"`
	Members       []struct {
		ID            string `json:"id"`
		Leader        bool   `json:"leader"`
		Version       string `json:"version"`
		VersionSource string `json:"version_source"`
	} `json:"members"`
}

func (d checkDoc) failing() []string {
	var f []string
	for _, c := range d.Checks {
		if !c.OK {
			f = append(f, c.Name)
		}
	}
	return f
}

func (d checkDoc) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "answered by %s, leader %s, cluster_format %d, safe %v;", d.AnsweredBy, d.LeaderID, d.ClusterFormat, d.Safe)
	for _, c := range d.Checks {
		fmt.Fprintf(&b, " %s ok=%v (%s);", c.Name, c.OK, c.Detail)
	}
	for _, m := range d.Members {
		fmt.Fprintf(&b, " %s %s/%s;", m.ID, m.Version, m.VersionSource)
	}
	return b.String()
}

// upgradeCheck waits (a minute at most) until `baton cluster upgrade-check
// --id id --json` gives the verdict want: safe, or not safe with exactly
// the checks fail failing (exit 1, stderr naming them). Whatever the
// verdict, each member must be shown as what it runs: a member on the
// release answers without a version, which upgrade-check takes as 0.1.0
// ("none"); one on the current build answers with its own. A master on the
// release answers with no cluster version (0), one on the current build
// with 1 or more. It returns the verdict.
func (r *run) upgradeCheck(ctx context.Context, id string, want bool, fail ...string) checkDoc {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for {
		code, stdout, stderr := r.cli(ctx, "cluster", "upgrade-check", "--id", id, "--json")
		var doc checkDoc
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			r.t.Fatalf("upgrade: upgrade-check --id %s: exit %d: %v\n%s%s", id, code, err, stdout, stderr)
		}
		wantCode, wantErr := 0, ""
		if !want {
			wantCode, wantErr = 1, fmt.Sprintf("not safe to restart %s now: %s", id, strings.Join(fail, ", "))
		}
		// A member that misses its second to answer is shown by its
		// report: asked again.
		shown := r.checkShown(doc)
		if shown == nil && doc.Safe == want && code == wantCode && slices.Equal(doc.failing(), fail) && strings.Contains(stderr, wantErr) {
			return doc
		}
		last = fmt.Sprintf("exit %d, %v; %s %s", code, shown, doc, strings.TrimSpace(stderr))
		if time.Now().After(deadline) {
			r.t.Fatalf("upgrade: upgrade-check --id %s never said safe=%v failing %v: last %s", id, want, fail, last)
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("upgrade: upgrade-check --id %s: %v (last %s)", id, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkShown: doc shows every member as what it runs.
func (r *run) checkShown(doc checkDoc) error {
	if len(doc.Members) != len(r.c.Nodes) {
		return fmt.Errorf("%d members shown, want %d", len(doc.Members), len(r.c.Nodes))
	}
	for _, m := range doc.Members {
		if r.c.BinaryOf(m.ID).Release != "" {
			if m.Version != "0.1.0" || m.VersionSource != "none" {
				return fmt.Errorf("%s runs the release, shown as %q (%s), want 0.1.0 (none)", m.ID, m.Version, m.VersionSource)
			}
		} else if m.Version != r.curVersion || m.VersionSource != "answer" {
			return fmt.Errorf("%s runs the current build, shown as %q (%s), want %s (answer)", m.ID, m.Version, m.VersionSource, r.curVersion)
		}
	}
	switch answeredBy := r.c.BinaryOf(doc.AnsweredBy).Release; {
	case answeredBy != "" && doc.ClusterFormat != 0:
		return fmt.Errorf("answered by %s on the release with cluster_format %d, want none (0)", doc.AnsweredBy, doc.ClusterFormat)
	case answeredBy == "" && doc.ClusterFormat == 0:
		return fmt.Errorf("answered by %s on the current build without a cluster_format", doc.AnsweredBy)
	}
	return nil
}

// statusJSON is `baton cluster status --json`, the keys this test reads.
type statusJSON struct {
	NodeID        string `json:"node_id"`
	ClusterFormat uint32 `json:"cluster_format"`
	Version       string `json:"version"`
	MaxFormat     uint32 `json:"max_format"`
	Peers         []struct {
		ID        string `json:"id"`
		Version   string `json:"version"`
		MaxFormat uint32 `json:"max_format"`
	} `json:"peers"`
}

// status waits (a minute at most) until `baton cluster status --json`,
// asked of node id ("" for any member), satisfies ok.
func (r *run) status(ctx context.Context, id string, ok func(statusJSON) error) statusJSON {
	r.t.Helper()
	args := []string{"cluster", "status", "--json"}
	if id != "" {
		args = append(args, "--addr", r.c.Node(id).GRPCAddr)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, stdout, stderr := r.cli(ctx, args...)
		var st statusJSON
		err := json.Unmarshal([]byte(stdout), &st)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr))
		}
		if err == nil {
			if err = ok(st); err == nil {
				return st
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.t.Fatalf("upgrade: baton %s: %v\n%s", strings.Join(args, " "), err, stdout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// showsCurrent: node id, just restarted on the current build, says so in
// cluster status, at a cluster version of 1 while another master runs
// the release.
func (r *run) showsCurrent(ctx context.Context, id string) {
	r.t.Helper()
	release := r.onRelease()
	r.status(ctx, id, func(st statusJSON) error {
		switch {
		case st.NodeID != id:
			return fmt.Errorf("answered by %s", st.NodeID)
		case st.Version != r.curVersion || st.MaxFormat != uint32(version.MaxFormat):
			return fmt.Errorf("%s shows version %q format %d, want %s format %d", id, st.Version, st.MaxFormat, r.curVersion, version.MaxFormat)
		case len(release) > 0 && st.ClusterFormat != 1:
			return fmt.Errorf("cluster_format %d while %v run the release", st.ClusterFormat, release)
		}
		return nil
	})
}

// onRelease lists the masters whose binary is a release.
func (r *run) onRelease() []string {
	var ids []string
	for _, n := range r.c.Nodes {
		if r.c.BinaryOf(n.ID).Release != "" {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// committedFormat is the cluster version node id's replicated state
// holds, read from its /debug/domain (which the release serves too): 1
// without the key, which the release never writes.
func committedFormat(ctx context.Context, c *harness.Cluster, id string) (version.Format, error) {
	kv, err := c.Domain(ctx, id, cluster.ClusterFormatKey)
	if err != nil {
		return 0, err
	}
	v, ok := kv[cluster.ClusterFormatKey]
	if !ok {
		return version.Format1, nil
	}
	return version.DecodeClusterFormat([]byte(v))
}

// formatWatch samples every master's cluster version (its replicated
// state's, and a current master's /status) until stopped, and keeps
// every sample taken while a master ran the release that was above 1.
type formatWatch struct {
	mu          sync.Mutex
	samples     int // taken while a master ran the release
	after       int // taken once none did
	highest     version.Format
	violations  []string
	stop        context.CancelFunc
	done        chan struct{}
	firstRaised time.Time // the first sample above 1
}

func (r *run) watchFormat(ctx context.Context) *formatWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &formatWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for wctx.Err() == nil {
			// A master goes from the release to the current build, never
			// back here but in the downgrade, which never raises: a
			// master on the release both before and after the reads
			// ran it while they were made.
			before := r.onRelease()
			got := map[string]version.Format{}
			for _, n := range r.c.Nodes {
				if f, err := committedFormat(wctx, r.c, n.ID); err == nil {
					got[n.ID+" state"] = f
				}
				if r.c.BinaryOf(n.ID).Release != "" {
					continue
				}
				if st, err := r.c.Status(wctx, n.ID); err == nil {
					got[n.ID+" /status"] = version.Format(st.ClusterFormat)
				}
			}
			after := r.onRelease()
			w.mu.Lock()
			for k, f := range got {
				w.highest = max(w.highest, f)
				if f > 1 && len(before) > 0 && len(after) > 0 && len(w.violations) < 10 {
					w.violations = append(w.violations, fmt.Sprintf("%s: cluster version %d while %v ran the release", k, f, after))
				}
				if f > 1 && w.firstRaised.IsZero() {
					w.firstRaised = time.Now()
				}
			}
			if len(got) > 0 {
				if len(after) > 0 {
					w.samples++
				} else {
					w.after++
				}
			}
			w.mu.Unlock()
			select {
			case <-wctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return w
}

// end stops the watch and fails the test if the cluster version went
// above 1 while a master ran the release, or if nothing was sampled then.
func (w *formatWatch) end(t *testing.T) (samples, after int, highest version.Format, raisedAt time.Time) {
	t.Helper()
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Errorf("upgrade: the cluster version was raised while a master ran the release:\n  %s", strings.Join(w.violations, "\n  "))
	}
	if w.samples == 0 {
		t.Errorf("upgrade: the cluster version was never sampled while a master ran the release")
	}
	return w.samples, w.after, w.highest, w.firstRaised
}

// raised waits until the cluster version is 2 everywhere once every
// master runs the current build: each master's state and /status, each
// one's baton_cluster_format metric, and cluster status, which shows
// every member's committed report as the current build's. upgrade-check
// then finds every member safe to restart. It returns when every master
// first held 2.
func (r *run) raised(ctx context.Context) time.Time {
	r.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.c.WaitClusterFormat(wctx, uint32(version.Format2)); err != nil {
		r.t.Fatalf("upgrade: the cluster version was not raised once every master ran the current build: %v", err)
	}
	at := time.Now()
	for _, n := range r.c.Nodes {
		if f, err := committedFormat(ctx, r.c, n.ID); err != nil || f != version.Format2 {
			r.t.Fatalf("upgrade: %s's state holds cluster version %d (%v), want 2", n.ID, f, err)
		}
		r.metricShows(ctx, n.ID, "baton_cluster_format 2")
		r.metricShows(ctx, n.ID, fmt.Sprintf(`baton_build_info{max_format="%d",version="%s"} 1`, version.MaxFormat, r.curVersion))
	}
	r.status(ctx, "", func(st statusJSON) error {
		if st.ClusterFormat != 2 {
			return fmt.Errorf("cluster_format %d", st.ClusterFormat)
		}
		for _, p := range st.Peers {
			if p.Version != r.curVersion || p.MaxFormat != uint32(version.MaxFormat) {
				return fmt.Errorf("peer %s reported %q format %d, want %s format %d", p.ID, p.Version, p.MaxFormat, r.curVersion, version.MaxFormat)
			}
		}
		return nil
	})
	code, stdout, stderr := r.cli(ctx, "cluster", "upgrade-check", "--json")
	var doc checkDoc
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || code != 0 || !doc.Safe || doc.ClusterFormat != 2 {
		r.t.Errorf("upgrade: upgrade-check after the raise: exit %d, %v, %s\n%s", code, err, doc, stderr)
	}
	return at
}

// metricShows waits (a minute at most) until node id's /metrics has the
// line want.
func (r *run) metricShows(ctx context.Context, id, want string) {
	r.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	if cr := r.c.ClientCredentials(); cr != nil {
		hc.Transport = &http.Transport{TLSClientConfig: cr.ClientConfig(security.RoleMaster)}
	}
	url := r.c.HTTPScheme() + "://" + r.c.Node(id).HTTPAddr + "/metrics"
	deadline := time.Now().Add(time.Minute)
	for {
		var last error
		resp, err := hc.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case rerr != nil:
				last = rerr
			case resp.StatusCode != http.StatusOK:
				last = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
			case slices.Contains(strings.Split(string(body), "\n"), want):
				return
			default:
				last = fmt.Errorf("no line %q", want)
			}
		} else {
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.t.Fatalf("upgrade: %s /metrics: %v", id, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// summaries submits a short fanout, waits for it, and checks its
// children (childrenKept). It returns how many, and the root.
func (r *run) summaries(ctx context.Context, kept bool) (int, *adminpb.Procedure) {
	r.t.Helper()
	id, err := r.fanoutOf(ctx, 3, 1, 10*time.Millisecond)
	if err != nil {
		r.t.Fatal(err)
	}
	r.waitAll(ctx, []uint64{id}, time.Minute)
	n := r.childrenKept(ctx, id, kept)
	root, err := r.cl.Get(ctx, id)
	if err != nil {
		r.t.Fatalf("upgrade: fanout %d: %v", id, err)
	}
	return n, root
}

// childrenKept asks for each child of id, a finished fanout of 3 children,
// whose records went with the root's finish. At cluster version 2 the
// root's record keeps their summaries (procedure record field 113, a
// format-2 write): each is answered, SUCCESS, summary only. Below 2 none
// is written: each is NOT_FOUND. It returns the children.
func (r *run) childrenKept(ctx context.Context, id uint64, kept bool) int {
	r.t.Helper()
	root, err := r.cl.Get(ctx, id)
	if err != nil {
		r.t.Fatalf("upgrade: fanout %d: %v", id, err)
	}
	if len(root.GetChildren()) != 3 {
		r.t.Fatalf("upgrade: fanout %d lists children %v, want 3", id, root.GetChildren())
	}
	for _, c := range root.GetChildren() {
		// A child's own record may still answer for a moment after the
		// root's finish; then it goes, and only a summary can answer.
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := r.cl.Get(ctx, c)
			own := err == nil && !p.GetSummaryOnly() && p.GetState() == "SUCCESS"
			switch {
			case kept && err == nil && p.GetSummaryOnly() && p.GetState() == "SUCCESS" && p.GetParentId() == id:
			case !kept && status.Code(err) == codes.NotFound:
			case own && time.Now().Before(deadline):
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			case kept:
				r.t.Errorf("upgrade: child %d of fanout %d at cluster version 2: %v, %v; want its summary (SUCCESS, summary only)", c, id, p, err)
			default:
				r.t.Errorf("upgrade: child %d of fanout %d below cluster version 2: %v, %v; want NOT_FOUND (no summary written)", c, id, p, err)
			}
			break
		}
	}
	return len(root.GetChildren())
}
