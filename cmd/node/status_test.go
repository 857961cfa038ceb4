package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
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
