package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// statusDoc runs cluster status --json through addr and decodes it.
func statusDoc(t *testing.T, addr string) (code int, doc statusJSON, stderr string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", addr, "--json", "--timeout", "5s")
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s\nstderr: %s", err, stdout, stderr)
	}
	return code, doc, stderr
}

// TestClusterStatusTellsTheTruth: cluster status asks every member for
// itself, so a dead master shows as unreachable (not as a standby), each
// member reports its raft state, term, indexes, last contact, pid and
// health, and without a quorum of voters reachable it exits 3 saying so.
func TestClusterStatusTellsTheTruth(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 3})
	leader, _ := fc.WaitLeader()
	var standbys []int
	for i := range fc.Masters() {
		if i != leader {
			standbys = append(standbys, i)
		}
	}
	pid := int64(os.Getpid()) // every in-process master runs in this process
	leaderAddr := fc.Master(leader).AdminAddr()

	// All up: every member answers for itself.
	testwait.ForNil(t, 30*time.Second, "every member reachable and following", func() error {
		code, doc, stderr := statusDoc(t, strings.Join(fc.AdminAddrs(), ","))
		if code != exitOK || doc.Voters == nil || *doc.Voters != 3 || *doc.VotersReachable != 3 || !*doc.Quorum || doc.Error != nil {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		if doc.PID != pid || doc.LastContactMs < 0 && doc.State != "Leader" {
			return fmt.Errorf("answering node: pid %d, last contact %d", doc.PID, doc.LastContactMs)
		}
		leaders := 0
		for _, p := range doc.Peers {
			if p.Reachable == nil || !*p.Reachable || p.MemberJSON == nil {
				return fmt.Errorf("%s not reachable: %q", p.ID, p.Error)
			}
			if p.PID != pid || !p.Ready || p.StorageError != "" || p.Term == 0 || p.CommitIndex == 0 || p.AppliedIndex == 0 {
				return fmt.Errorf("%s: %+v", p.ID, *p.MemberJSON)
			}
			// The leader's view, from whichever member answers (a
			// standby passes on the leader's).
			if p.Healthy == nil || !*p.Healthy || p.LagEntries == nil || p.LeaderContactMs == nil {
				return fmt.Errorf("%s: leader's view: healthy %v, lag %v, contact %v", p.ID, p.Healthy, p.LagEntries, p.LeaderContactMs)
			}
			if p.Suffrage != "Voter" {
				return fmt.Errorf("%s: suffrage %q", p.ID, p.Suffrage)
			}
			if p.State == "Leader" {
				leaders++
			} else if p.State != "Follower" || p.LastContactMs < 0 {
				return fmt.Errorf("%s: state %s, last contact %d ms", p.ID, p.State, p.LastContactMs)
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d leaders", leaders)
		}
		return nil
	})
	code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", leaderAddr)
	for _, want := range []string{fmt.Sprintf("pid %d, ok", pid), "voters       3 of 3 reachable: quorum", "LAST CONTACT", "PID", "HEALTH", "Follower", "Leader", "LAG", "LEADER SEES", "healthy"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("exit %d, stdout lacks %q:\n%s\nstderr: %s", code, want, stdout, stderr)
		}
	}

	// One standby dead: still a quorum (exit 0), the dead one unreachable.
	dead := fc.Master(standbys[0]).ID
	fc.Kill(standbys[0])
	testwait.ForNil(t, 30*time.Second, dead+" unreachable", func() error {
		code, doc, stderr := statusDoc(t, leaderAddr)
		if code != exitOK || doc.VotersReachable == nil || *doc.VotersReachable != 2 || !*doc.Quorum {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		for _, p := range doc.Peers {
			if p.ID == dead && (*p.Reachable || p.Error == "" || p.MemberJSON != nil) {
				return fmt.Errorf("%s: %+v", dead, p)
			}
		}
		return nil
	})
	code, stdout, stderr = runCLI(t, nil, "cluster", "status", "--addr", leaderAddr)
	for _, want := range []string{"voters       2 of 3 reachable: quorum", dead + ": 127.0.0.1:", "unreachable  -"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("exit %d, stdout lacks %q:\n%s\nstderr: %s", code, want, stdout, stderr)
		}
	}

	// Both standbys dead: no quorum, exit 3, said on stderr and in --json.
	fc.Kill(standbys[1])
	testwait.ForNil(t, 30*time.Second, "no quorum", func() error {
		code, doc, stderr := statusDoc(t, leaderAddr)
		if code != exitUnavailable || doc.Quorum == nil || *doc.Quorum || !strings.Contains(stderr, "no quorum: 1 of 3 voters reachable") {
			return fmt.Errorf("exit %d, %+v, stderr %s", code, doc, stderr)
		}
		if doc.Error == nil || doc.Error.Code != "UNAVAILABLE" || doc.Error.Message != "no quorum: 1 of 3 voters reachable" || doc.Error.ExitCode != exitUnavailable {
			return fmt.Errorf("error %+v", doc.Error)
		}
		return nil
	})
	code, stdout, stderr = runCLI(t, nil, "cluster", "status", "--addr", leaderAddr)
	if code != exitUnavailable || !strings.Contains(stdout, "1 of 3 reachable: NO QUORUM") || stderr != "baton cluster status: no quorum: 1 of 3 voters reachable\n" {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// cluster status shows the answering master's last good scheduled
// snapshot, in --json as last_snapshot (the keys of /status) and in text
// as a line of its own; a master that has taken none (a standby, or the
// leader before its first) shows neither.
func TestClusterStatusLastSnapshot(t *testing.T) {
	clk := clock.NewManual(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	root := t.TempDir()
	dirOf := func(i int) string { return filepath.Join(root, fmt.Sprintf("m%d", i)) }
	fc := clustertest.New(t, clustertest.Config{SteadyLeader: true, Admin: func(i int, cfg *admin.Config) {
		cfg.Snapshots = &admin.SnapshotSchedule{Interval: time.Hour, Dir: dirOf(i), Retain: 2, Clock: clk}
	}})
	li, _ := fc.WaitLeader()
	leaderAddr := fc.Master(li).AdminAddr()
	standbyAddr := fc.Master((li + 1) % 3).AdminAddr()

	noSnapshot := func(addr string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", addr, "--json")
		var doc map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); code != exitOK || err != nil {
			t.Fatalf("exit %d, %v: %s %s", code, err, stdout, stderr)
		}
		if v, ok := doc["last_snapshot"]; ok {
			t.Fatalf("%s: last_snapshot %v, want none", addr, v)
		}
		if _, stdout, _ := runCLI(t, nil, "cluster", "status", "--addr", addr); strings.Contains(stdout, "snapshot ") {
			t.Fatalf("%s: the text shows a snapshot:\n%s", addr, stdout)
		}
	}
	noSnapshot(leaderAddr)

	clk.Advance(time.Second) // every master's first tick: the leader writes
	var doc map[string]any
	testwait.ForNil(t, 30*time.Second, "the leader's snapshot in cluster status", func() error {
		code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", leaderAddr, "--json")
		doc = nil
		if err := json.Unmarshal([]byte(stdout), &doc); code != exitOK || err != nil {
			return fmt.Errorf("exit %d, %v: %s %s", code, err, stdout, stderr)
		}
		if doc["last_snapshot"] == nil {
			return fmt.Errorf("no last_snapshot yet")
		}
		return nil
	})
	es, err := os.ReadDir(dirOf(li))
	if err != nil || len(es) != 1 {
		t.Fatalf("the leader's snapshot directory: %v %v", es, err)
	}
	file := filepath.Join(dirOf(li), es[0].Name())
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := fc.Master(li).Admin().ClusterStatus(ctxT(t), &adminpb.ClusterStatusRequest{})
	if err != nil || rs.GetLastSnapshot() == nil {
		t.Fatalf("the leader's own answer: %v, %v", rs.GetLastSnapshot(), err)
	}
	last := rs.GetLastSnapshot()
	want := map[string]any{"file": file, "time": time.UnixMilli(last.GetUnixMs()).UTC().Format("2006-01-02T15:04:05.000Z07:00"), "index": float64(last.GetIndex()),
		"bytes": float64(st.Size()), "duration_ms": float64(last.GetDurationMs())}
	got, _ := doc["last_snapshot"].(map[string]any)
	if len(got) != len(want) || !jsonHas(got, want) {
		t.Fatalf("last_snapshot %v, want %v", got, want)
	}
	if !strings.HasSuffix(file, fmt.Sprintf("-%d.snap", last.GetIndex())) || last.GetIndex() == 0 || last.GetFile() != file {
		t.Fatalf("file %s, the answer's %s at index %d", file, last.GetFile(), last.GetIndex())
	}

	code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", leaderAddr)
	line := fmt.Sprintf("snapshot     last scheduled one at index %d, taken %s, %d bytes", last.GetIndex(), want["time"], st.Size())
	if code != exitOK || !strings.Contains(stdout, line) || !strings.Contains(stdout, ": "+file+"\n") {
		t.Fatalf("exit %d, stdout lacks %q and the file:\n%s\nstderr: %s", code, line, stdout, stderr)
	}
	// A standby answers for itself: it took none.
	noSnapshot(standbyAddr)
}
