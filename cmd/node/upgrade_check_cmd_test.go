package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/internal/testwait"
	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// statusMember is a peer of a test status answer. applied is its applied index
// (the leader's is also its commit index); down: it did not answer.
type statusMember struct {
	id       string
	voter    bool
	leader   bool
	down     bool
	notReady bool
	applied  uint64
	version  string // its answer's ("" as 0.1.0 answers)
	report   string // its committed report
	format   uint32 // its answer's max_format
}

func upgradeStatus(answeredBy string, members ...statusMember) *adminpb.ClusterStatusResponse {
	s := &adminpb.ClusterStatusResponse{NodeId: answeredBy, MembersProbed: true, ClusterFormat: 1}
	for _, m := range members {
		p := &adminpb.Peer{Id: m.id, Suffrage: "Voter", Leader: m.leader, Version: m.report, AdminAddress: "127.0.0.1:1"}
		if !m.voter {
			p.Suffrage = "Nonvoter"
		}
		if m.down {
			p.Error = "connection refused"
		} else {
			st := &adminpb.ClusterStatusResponse{NodeId: m.id, AppliedIndex: m.applied, Ready: !m.notReady, Version: m.version, MaxFormat: m.format}
			if m.notReady {
				st.ReadyReason = "catching up"
			}
			if m.leader {
				st.CommitIndex = m.applied
			}
			p.Reachable, p.Status = true, st
		}
		s.Peers = append(s.Peers, p)
	}
	return s
}

// rsAt is a listed region server that registered with version and
// maxFormat ("" and 0: said none, as 0.1.0).
func rsAt(id, version string, maxFormat uint32, lease string) *adminpb.Server {
	return &adminpb.Server{Id: id, Address: "127.0.0.1:2", StartCode: 1, LeaseState: lease, Version: version, MaxFormat: maxFormat}
}

func TestDecideUpgrade(t *testing.T) {
	const cur, old = "0.2.0-dev", "" // old: a 0.1.0 member answers without a version
	v := func(id string, leader bool, version string) statusMember {
		return statusMember{id: id, voter: true, leader: leader, applied: 1000, version: version}
	}
	line := semver.Line{Major: 0, Minor: 2}
	for _, tc := range []struct {
		name    string
		members []statusMember
		id      string
		safe    bool
		failed  []string // the checks that fail, in order
		detail  string   // a failing (or the first) check's detail holds it
		usage   string   // decideUpgrade refuses id with this
		perSafe map[string]bool
		rs      regionServerList
	}{
		{name: "a follower, all current", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)},
			id: "m2", safe: true, detail: "within 100 entries of the leader's commit index 1000"},
		{name: "the leader first", members: []statusMember{v("m1", true, old), v("m2", false, old), v("m3", false, old)},
			id: "m1", failed: []string{checkLeader}, detail: "m1 leads while other members do not run this binary's release line 0.2 (m2 0.1.0 (reports none), m3 0.1.0 (reports none))"},
		{name: "the leader last", members: []statusMember{v("m1", true, old), v("m2", false, cur), v("m3", false, "v0.2.0")},
			id: "m1", safe: true, detail: "its turn is last"},
		{name: "mixed, an old follower", members: []statusMember{v("m1", true, old), v("m2", false, cur), v("m3", false, old)},
			id: "m3", safe: true},
		{name: "one behind by more than the bound", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 899, version: cur}},
			id: "m2", failed: []string{checkCaughtUp}, detail: "m3 applied 899, 101 behind"},
		{name: "one behind by the bound", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 900, version: cur}},
			id: "m2", safe: true},
		{name: "another not answering", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, down: true}},
			id: "m2", failed: []string{checkCaughtUp, checkQuorum}, detail: "without m2, 1 of the 3 voters stay healthy (m1); a quorum is 2; m3 not answering: connection refused"},
		{name: "itself not answering", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, down: true, report: cur}},
			id: "m3", failed: []string{checkCaughtUp}, detail: "m3 not answering"},
		{name: "the leader not answering", members: []statusMember{{id: "m1", voter: true, leader: true, down: true}, v("m2", false, cur), v("m3", false, cur)},
			id: "m2", failed: []string{checkCaughtUp, checkQuorum}, detail: "the leader m1 is not answering"},
		{name: "no leader known", members: []statusMember{v("m1", false, cur), v("m2", false, cur), v("m3", false, cur)},
			id: "m2", failed: []string{checkCaughtUp}, detail: "no leader known"},
		{name: "another not ready", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 1000, notReady: true}},
			id: "m2", failed: []string{checkQuorum}, detail: "m3 not ready: catching up"},
		{name: "five voters, one down", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur), v("m4", false, cur), {id: "m5", voter: true, applied: 1000, down: true}},
			id: "m2", failed: []string{checkCaughtUp}, detail: "m5 not answering"},
		{name: "a non-voter leaves the quorum alone", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m4", applied: 1000, version: cur}},
			id: "m4", safe: true},
		{name: "older than N-1", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, "0.0.9")},
			id: "m2", failed: []string{checkVersions}, detail: "older than release line 0.1, the oldest this binary (0.2) upgrades from: m3 0.0.9"},
		{name: "a version that is none, with a format", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 1000, version: "custom-build", format: 2}},
			id: "m1", safe: true},
		{name: "a version that is none, without a format", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 1000, version: "custom-build"}},
			id: "m2", failed: []string{checkVersions}, detail: "m3 custom-build: not a version this binary can place"},
		{name: "its answer over its report", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, applied: 1000, report: cur}},
			id: "m1", failed: []string{checkLeader}, detail: "m3 0.1.0 (reports none)"},
		{name: "its report when not answering", members: []statusMember{v("m1", true, cur), v("m2", false, cur), {id: "m3", voter: true, down: true, report: "0.0.1"}},
			id: "m3", failed: []string{checkCaughtUp, checkVersions}, detail: "m3 0.0.1 (last report; not answering)"},
		{name: "region servers current, N-1 and unreported", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)}, id: "m2", safe: true,
			rs:     regionServerList{servers: []*adminpb.Server{rsAt("rs1", cur, 2, "live"), rsAt("rs2", "0.1.9", 2, "live"), rsAt("rs3", "", 0, "unconfirmed")}},
			detail: "m1 0.2.0-dev, m2 0.2.0-dev, m3 0.2.0-dev, region server rs1 0.2.0-dev, region server rs2 0.1.9, region server rs3 0.1.0 (reports none)"},
		{name: "a region server older than N-1", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)}, id: "m2",
			rs:     regionServerList{servers: []*adminpb.Server{rsAt("rs1", cur, 2, "live"), rsAt("rs2", "0.0.9", 1, "suspect")}},
			failed: []string{checkVersions}, detail: "older than release line 0.1, the oldest this binary (0.2) upgrades from: region server rs2 0.0.9;"},
		{name: "an expired region server is not counted", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)}, id: "m2", safe: true,
			rs: regionServerList{servers: []*adminpb.Server{rsAt("rs1", "0.0.9", 1, "expired")}}},
		{name: "region servers not listed", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)}, id: "m2",
			rs:     regionServerList{err: errors.New("no leader")},
			failed: []string{checkVersions}, detail: "the region servers could not be listed, so none is known not to be older: no leader"},
		{name: "every member", members: []statusMember{v("m1", true, old), v("m2", false, cur), v("m3", false, old)},
			failed: nil, perSafe: map[string]bool{"m1": false, "m2": true, "m3": true}},
		{name: "every member, all safe", members: []statusMember{v("m1", true, cur), v("m2", false, cur), v("m3", false, cur)},
			safe: true, perSafe: map[string]bool{"m1": true, "m2": true, "m3": true}},
		{name: "an unknown member", members: []statusMember{v("m1", true, cur), v("m2", false, cur)},
			id: "m9", usage: `--id "m9" is not a member of the cluster (members, as m1 sees them: m1, m2)`},
		{name: "an empty cluster", id: "", safe: false, failed: []string{checkCaughtUp}, detail: "no leader known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := decideUpgrade(upgradeStatus("m1", tc.members...), tc.rs, tc.id, line)
			if tc.usage != "" {
				var ue *usageError
				if err == nil || err.Error() != tc.usage || !errors.As(err, &ue) {
					t.Fatalf("err %v, want the usage error %q", err, tc.usage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var failed []string
			var details []string
			for _, c := range doc.Checks {
				if !c.OK {
					failed = append(failed, c.Name)
				}
				details = append(details, c.Detail)
			}
			if doc.Safe != tc.safe || fmt.Sprint(failed) != fmt.Sprint(tc.failed) || !strings.Contains(strings.Join(details, "\n"), tc.detail) {
				t.Errorf("safe %v, failed %v; want safe %v, failed %v, a detail holding %q; checks:\n%s", doc.Safe, failed, tc.safe, tc.failed, tc.detail, strings.Join(details, "\n"))
			}
			if tc.id != "" && len(doc.Checks) != 4 || tc.id == "" && len(doc.Checks) != 2 {
				t.Errorf("%d checks: %+v", len(doc.Checks), doc.Checks)
			}
			for _, m := range doc.Members {
				if want, ok := tc.perSafe[m.ID]; ok && m.Safe != want {
					t.Errorf("member %s safe %v, want %v: %+v", m.ID, m.Safe, want, m.Checks)
				}
				if m.Safe != allOK(m.Checks) || len(m.Checks) != 4 {
					t.Errorf("member %s: safe %v, checks %+v", m.ID, m.Safe, m.Checks)
				}
			}
			if len(doc.Members) != len(tc.members) || doc.ReleaseLine != "0.2" || doc.OldestLine != "0.1" || doc.CaughtUpBound != caughtUpBound {
				t.Errorf("doc %+v", doc)
			}
		})
	}
}

// upgradeCheckDoc runs cluster upgrade-check --json and decodes it.
func upgradeCheckDoc(t *testing.T, args ...string) (code int, doc upgradeCheckJSON, stderr string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, nil, append([]string{"cluster", "upgrade-check", "--json", "--timeout", "5s"}, args...)...)
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s\nstderr: %s", err, stdout, stderr)
	}
	return code, doc, stderr
}

// TestClusterUpgradeCheck against an in-process cluster: a follower may
// go, the leader may not while a member runs an older line, an unknown id
// is bad usage (exit 2), and a dead member makes the next step unsafe.
func TestClusterUpgradeCheck(t *testing.T) {
	// Without the domain, a master's answer says the build it was
	// started as (RestartAs); the domain's backend answers this binary's.
	fc := clustertest.New(t, clustertest.Config{Masters: 3, NoDomain: true})
	leader, _ := fc.WaitLeader()
	follower, other := (leader+1)%3, (leader+2)%3
	addr := "--addr=" + strings.Join(fc.AdminAddrs(), ",")
	fid, lid, oid := fc.Master(follower).ID, fc.Master(leader).ID, fc.Master(other).ID

	testwait.ForNil(t, 30*time.Second, "a follower safe to restart", func() error {
		code, doc, stderr := upgradeCheckDoc(t, addr, "--id", fid)
		if code != exitOK || !doc.Safe || doc.Member != fid || len(doc.Checks) != 4 || len(doc.Members) != 3 || doc.LeaderID != lid || doc.ClusterFormat == 0 {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		return nil
	})
	code, stdout, stderr := runCLI(t, nil, "cluster", "upgrade-check", addr, "--id", fid)
	if code != exitOK || stderr != "" || !strings.Contains(stdout, "safe: "+fid+" may be restarted now") || !strings.Contains(stdout, "  ok  quorum_kept  ") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	// Another follower on the line before (N−1 is fine), which the leader
	// must wait for. It stands in for 0.1.0, which could not start: the
	// cluster version was raised as soon as the cluster formed.
	fc.RestartAs(other, semver.Build{Version: "0.1.9", MaxFormat: semver.MaxFormat})
	testwait.ForNil(t, 30*time.Second, "the leader told to go last", func() error {
		code, doc, stderr := upgradeCheckDoc(t, addr, "--id", lid)
		if code != exitFailed || doc.Safe || doc.Checks[3].Name != checkLeader || doc.Checks[3].OK || !strings.Contains(doc.Checks[3].Detail, oid+" 0.1.9") ||
			stderr != "baton cluster upgrade-check: not safe to restart "+lid+" now: leader\n" {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		return nil
	})
	code, stdout, stderr = runCLI(t, nil, "cluster", "upgrade-check", addr)
	if code != exitFailed || !strings.Contains(stdout, "no: leader") || !strings.Contains(stderr, "not safe to restart every member now: "+lid) {
		t.Errorf("every member: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, nil, "cluster", "upgrade-check", addr, "--id", "nosuch")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, `--id "nosuch" is not a member of the cluster`) || !strings.Contains(stderr, "run 'baton cluster upgrade-check -h' for usage") {
		t.Errorf("unknown id: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	// A member down: restarting another would leave no quorum.
	fc.Kill(other)
	testwait.ForNil(t, 30*time.Second, oid+" not answering", func() error {
		code, doc, stderr := upgradeCheckDoc(t, addr, "--id", fid)
		if code != exitFailed || doc.Safe || doc.Checks[0].OK || doc.Checks[1].OK || !strings.Contains(doc.Checks[1].Detail, oid+" not answering") {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		return nil
	})

	// Nobody answers: unavailable, as cluster status says it (exit 3).
	code, _, stderr = runCLI(t, nil, "cluster", "upgrade-check", "--addr", clustertest.DeadAddr(t), "--timeout", "500ms")
	if code != exitUnavailable || !strings.Contains(stderr, "UNAVAILABLE") {
		t.Errorf("no cluster: exit %d, stderr %s", code, stderr)
	}
}

// TestRegionServerVersions: each region server's registration says its
// binary, which rs list shows and upgrade-check counts. One whose
// registration says nothing (0.1.0, simulated by a raw RegisterServer
// without fields 101 and 102) shows as not reported, counts as 0.1.0 and
// is allowed; one of a line older than N−1 fails no_member_too_old, named.
func TestRegionServerVersions(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 3, Domain: func(_ int, d *domain.Config) {
		// The simulated 0.1.0 server never heartbeats: keep its lease
		// from expiring (an expired server is not counted) for the test.
		d.ServerLease.HardLimit = time.Hour
	}})
	leader, _ := fc.WaitLeader()
	addr := "--addr=" + strings.Join(fc.AdminAddrs(), ",")
	fc.StartRegionServer("rs1")
	fc.StartRegionServer("rs2", func(c *regionserver.Config) { c.Build = semver.Build{Version: "0.1.9", MaxFormat: semver.Format1} })

	cc, err := grpc.NewClient(fc.AdminAddrs()[leader], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	testwait.ForNil(t, 30*time.Second, "rs0 registered without a version", func() error {
		_, err := rspb.NewMasterClient(cc).RegisterServer(ctxT(t), &rspb.RegisterServerRequest{ServerId: "rs0", Address: clustertest.DeadAddr(t)})
		return err
	})

	listed := func() (map[string]serverJSON, error) {
		code, stdout, stderr := runCLI(t, nil, "rs", "list", "--json", addr)
		var doc serversJSON
		if code != exitOK || json.Unmarshal([]byte(stdout), &doc) != nil {
			return nil, fmt.Errorf("rs list: exit %d, stdout %s, stderr %s", code, stdout, stderr)
		}
		out := map[string]serverJSON{}
		for _, s := range doc.Servers {
			out[s.ID] = s
		}
		return out, nil
	}
	testwait.ForNil(t, 30*time.Second, "the region servers' versions listed", func() error {
		got, err := listed()
		if err != nil {
			return err
		}
		if got["rs1"].Version != semver.Dev || got["rs1"].MaxFormat != uint32(semver.MaxFormat) ||
			got["rs2"].Version != "0.1.9" || got["rs2"].MaxFormat != 1 ||
			got["rs0"].ID != "rs0" || got["rs0"].Version != "" || got["rs0"].MaxFormat != 0 {
			return fmt.Errorf("listed %+v", got)
		}
		return nil
	})
	code, stdout, stderr := runCLI(t, nil, "rs", "list", addr)
	if code != exitOK || !regexp.MustCompile(`(?m)^rs0 .* not reported \(format 1\) `).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^rs1 .* `+regexp.QuoteMeta(semver.Dev)+` \(format 2\) `).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^rs2 .* 0\.1\.9 \(format 1\) `).MatchString(stdout) || !strings.Contains(stdout, "VERSION") {
		t.Errorf("rs list: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	code, doc, stderr := upgradeCheckDoc(t, addr)
	versions := doc.Checks[1]
	if versions.Name != checkVersions || !versions.OK ||
		!strings.Contains(versions.Detail, "region server rs0 0.1.0 (reports none)") || !strings.Contains(versions.Detail, "region server rs1 "+semver.Dev) ||
		!strings.Contains(versions.Detail, "region server rs2 0.1.9") {
		t.Errorf("upgrade-check: exit %d, checks %+v, stderr %s", code, doc.Checks, stderr)
	}
	byID := map[string]upgradeServerJSON{}
	for _, s := range doc.RegionServers {
		byID[s.ID] = s
	}
	if len(byID) != 3 || byID["rs0"] != (upgradeServerJSON{ID: "rs0", LeaseState: byID["rs0"].LeaseState, Version: "0.1.0", VersionSource: "none", MaxFormat: 1}) ||
		byID["rs1"].Version != semver.Dev || byID["rs1"].VersionSource != "report" || byID["rs2"].Version != "0.1.9" {
		t.Errorf("upgrade-check region_servers %+v", doc.RegionServers)
	}

	// Too old: a line before N−1.
	fc.StartRegionServer("rs3", func(c *regionserver.Config) { c.Build = semver.Build{Version: "0.0.7", MaxFormat: semver.Format1} })
	testwait.ForNil(t, 30*time.Second, "rs3 too old", func() error {
		code, doc, stderr := upgradeCheckDoc(t, addr)
		versions := doc.Checks[1]
		if code != exitFailed || versions.Name != checkVersions || versions.OK ||
			!strings.Contains(versions.Detail, "older than release line 0.1, the oldest this binary (0.2) upgrades from: region server rs3 0.0.7;") {
			return fmt.Errorf("exit %d, checks %+v, stderr %s", code, doc.Checks, stderr)
		}
		return nil
	})
}
