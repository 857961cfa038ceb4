package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

// removeStatusDoc is what the test reads of cluster status, join and
// remove --json.
type removeStatusDoc struct {
	NodeID         string `json:"node_id"`
	State          string `json:"state"`
	LeaderID       string `json:"leader_id"`
	AppliedIndex   uint64 `json:"applied_index"`
	Removed        bool   `json:"removed"`
	AlreadyRemoved bool   `json:"already_removed"`
	Ready          bool   `json:"ready"`
	ReadyReason    string `json:"ready_reason"`
	Peers          []struct {
		ID       string `json:"id"`
		Suffrage string `json:"suffrage"`
	} `json:"peers"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (d removeStatusDoc) peerIDs() []string {
	var ids []string
	for _, p := range d.Peers {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestRemoveLeader: 'baton cluster remove <the leader>' on three real
// masters. Without --yes it only says what it would do (exit 2). With it,
// the leader hands leadership over and the new leader removes it: exit 0
// with the committed configuration of the two others; the same removal
// again is exit 0 (already removed), and the audit trail ends with the
// calls OK, none PENDING. The removed master keeps running and says it is
// not a member (cluster status exit 1, /readyz 503, calls refused); it
// never disturbs the two members. 'baton cluster join' takes it back
// without a restart, as a voter: with the other leader killed, the two
// left (it among them) elect a leader and serve.
func TestRemoveLeader(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 3*time.Minute)
	all := strings.Join(c.AdminAddrs(), ",")
	var others []string
	for _, n := range c.Nodes {
		if n.ID != leader {
			others = append(others, n.GRPCAddr)
		}
	}
	membersAddr := strings.Join(others, ",")
	// Every master knows every admin address (registered once it follows
	// a leader): the old leader forwards the removal to the new one by it.
	testwait.ForNil(t, 60*time.Second, "every member's admin address registered", func() error {
		code, out, serr := runCLI(t, ctx, "cluster", "status", "--addr", all, "--json")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, serr)
		}
		var st struct {
			Peers []struct {
				ID     string `json:"id"`
				Admin  string `json:"admin_address"`
				Status *struct {
					Ready bool `json:"ready"`
				} `json:"status"`
				Reachable *bool `json:"reachable"`
			} `json:"peers"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		for _, p := range st.Peers {
			if p.Admin == "" || p.Reachable == nil || !*p.Reachable {
				return fmt.Errorf("%s: admin address %q, reachable %v", p.ID, p.Admin, p.Reachable)
			}
		}
		return nil
	})
	// The mark that makes a retried removal already_removed is written
	// once the cluster version allows it.
	if err := c.WaitClusterFormat(ctx, 2); err != nil {
		t.Fatal(err)
	}

	decode := func(what, s string) removeStatusDoc {
		t.Helper()
		var d removeStatusDoc
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			t.Fatalf("%s: stdout is not one JSON document: %v\n%s", what, err, s)
		}
		return d
	}
	run := func(what string, want int, args ...string) (string, string) {
		t.Helper()
		code, out, serr := runCLI(t, ctx, args...)
		if code != want {
			t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, want, out, serr)
		}
		return out, serr
	}

	// Without --yes: a dry run, exit 2, nothing removed.
	out, serr := run("remove without --yes", 2, "cluster", "remove", leader, "--addr", all)
	if !strings.Contains(out, "dry run: would remove "+leader+", the leader") || !strings.Contains(serr, "add --yes") {
		t.Errorf("remove without --yes: stdout %q stderr %q", out, serr)
	}
	out, _ = run("status after the dry run", 0, "cluster", "status", "--addr", all, "--json")
	if st := decode("status", out); len(st.Peers) != 3 {
		t.Fatalf("after a dry run: peers %v, want all 3", st.peerIDs())
	}

	// The removal: answered by the new leader, with the committed
	// configuration.
	out, _ = run("remove the leader", 0, "cluster", "remove", leader, "--yes", "--addr", all, "--json")
	rm := decode("remove", out)
	if slices.Contains(rm.peerIDs(), leader) || len(rm.Peers) != 2 || rm.LeaderID == leader || rm.LeaderID == "" || rm.AlreadyRemoved {
		t.Fatalf("remove %s: answered by %s, leader %q, peers %v, already_removed %v; want the 2 others, led by one of them", leader, rm.NodeID, rm.LeaderID, rm.peerIDs(), rm.AlreadyRemoved)
	}
	t.Logf("removed %s; %s leads %v", leader, rm.LeaderID, rm.peerIDs())

	// The same removal again (as after a lost answer): success. The
	// removed master is first in the list: it turns the call away and the
	// client asks the next.
	out, _ = run("remove again", 0, "cluster", "remove", leader, "--yes", "--addr", all, "--json")
	if again := decode("remove again", out); !again.AlreadyRemoved || len(again.Peers) != 2 {
		t.Errorf("remove again: already_removed %v, peers %v", again.AlreadyRemoved, again.peerIDs())
	}
	out, _ = run("remove again, human", 0, "cluster", "remove", leader, "--yes", "--addr", membersAddr)
	if !strings.Contains(out, leader+" is not a member of the cluster: an earlier removal took it out") {
		t.Errorf("remove again: %q", out)
	}

	// The audit trail: every RemovePeer call's outcome is recorded OK,
	// none stays PENDING (the old leader's record of the call it handed
	// over is completed through the new leader).
	testwait.ForNil(t, 30*time.Second, "RemovePeer audit records all OK", func() error {
		code, out, serr := runCLI(t, ctx, "audit", "list", "--method", "RemovePeer", "--addr", membersAddr, "--json")
		if code != 0 {
			return fmt.Errorf("audit list: exit %d: %s", code, serr)
		}
		var doc struct {
			Records []struct {
				Node    string `json:"node"`
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"records"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return err
		}
		ok := 0
		for _, r := range doc.Records {
			if r.Code != "OK" {
				return fmt.Errorf("a RemovePeer record by %s says %s (%s)", r.Node, r.Code, r.Message)
			}
			ok++
		}
		if ok < 3 { // the removal and its two repeats, at least
			return fmt.Errorf("%d RemovePeer records, want at least 3: %s", ok, out)
		}
		return nil
	})

	// The removed master: still running, and says it is not a member.
	if !c.Node(leader).Running() {
		t.Fatalf("%s exited after its removal; it should keep running until re-joined", leader)
	}
	// It learns of its removal from raft if the change reached it, else
	// from the leader once it stops hearing from it (a few seconds).
	testwait.ForNil(t, 30*time.Second, leader+" saying it is not a member", func() error {
		code, out, serr := runCLI(t, ctx, "cluster", "status", "--addr", c.Node(leader).GRPCAddr, "--json")
		var st removeStatusDoc
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("exit %d: %v: %s %s", code, err, out, serr)
		}
		if code != 1 || !st.Removed || st.Ready || st.Error == nil || st.Error.Code != "FAILED_PRECONDITION" ||
			!strings.Contains(st.ReadyReason, "baton cluster join --id "+leader) || !strings.Contains(serr, "not a member of the cluster") {
			return fmt.Errorf("exit %d: removed %v, ready %v (%s), error %+v; stderr %s", code, st.Removed, st.Ready, st.ReadyReason, st.Error, serr)
		}
		return nil
	})
	out, _ = run("human status of the removed master", 1, "cluster", "status", "--addr", c.Node(leader).GRPCAddr)
	if !strings.Contains(out, "member       NO") {
		t.Errorf("human status of %s:\n%s", leader, out)
	}
	// Given every address, status passes over it for a member's answer.
	out, _ = run("status of all", 0, "cluster", "status", "--addr", all, "--json")
	if st := decode("status of all", out); st.NodeID == leader || st.Removed || len(st.Peers) != 2 {
		t.Errorf("status given all addresses: answered by %s (removed %v), peers %v", st.NodeID, st.Removed, st.peerIDs())
	}
	testwait.ForNil(t, 30*time.Second, leader+" /readyz 503 saying it is not a member", func() error {
		return readyzSays(ctx, c, leader, http.StatusServiceUnavailable, "not a member")
	})
	// A call it does not serve is refused, saying why (once it no longer
	// names a leader to follow, which it stops hearing from).
	testwait.ForNil(t, 30*time.Second, leader+" refusing a read, saying it is not a member", func() error {
		code, _, serr := runCLI(t, ctx, "proc", "list", "--addr", c.Node(leader).GRPCAddr, "--timeout", "1s")
		if code != 3 || !strings.Contains(serr, "is not a member of the cluster") {
			return fmt.Errorf("exit %d: %s", code, serr)
		}
		return nil
	})

	// The two members serve, undisturbed by it.
	out, _ = run("submit to the two", 0, "proc", "submit", "sleep", "--arg", "steps=1", "--arg", "delay=1ms", "--wait", "--addr", membersAddr, "--json")
	_ = out

	// Re-join without a restart.
	n := c.Node(leader)
	out, _ = run("re-join", 0, "cluster", "join", "--id", leader, "--raft-addr", n.RaftAddr, "--admin-addr", n.GRPCAddr, "--addr", membersAddr, "--json")
	if st := decode("re-join", out); !slices.Contains(st.peerIDs(), leader) || len(st.Peers) != 3 {
		t.Fatalf("re-join: peers %v", st.peerIDs())
	}
	var newLeader string
	testwait.ForNil(t, 60*time.Second, leader+" a voter following the leader again", func() error {
		code, out, serr := runCLI(t, ctx, "cluster", "status", "--addr", n.GRPCAddr, "--json", "--timeout", "2s")
		if code != 0 {
			return fmt.Errorf("exit %d: %s %s", code, out, serr)
		}
		var st removeStatusDoc
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		if st.Removed || !st.Ready || st.State != "Follower" || st.LeaderID == "" || st.LeaderID == leader {
			return fmt.Errorf("%s: %s, leader %q, removed %v, ready %v (%s)", leader, st.State, st.LeaderID, st.Removed, st.Ready, st.ReadyReason)
		}
		for _, p := range st.Peers {
			if p.ID == leader && p.Suffrage != "Voter" {
				return fmt.Errorf("%s is a %s", leader, p.Suffrage)
			}
		}
		newLeader = st.LeaderID
		return nil
	})

	// It votes: with the leader killed, the two left need its vote to
	// elect one, and then serve.
	c.Kill(newLeader)
	var left []string
	for _, x := range c.Nodes {
		if x.ID != newLeader {
			left = append(left, x.GRPCAddr)
		}
	}
	testwait.ForNil(t, 90*time.Second, "a leader elected by "+leader+" and the other survivor", func() error {
		code, out, serr := runCLI(t, ctx, "proc", "submit", "sleep", "--arg", "steps=1", "--arg", "delay=1ms", "--nonce", "after-rejoin", "--wait", "--addr", strings.Join(left, ","), "--json", "--timeout", "5s")
		if code != 0 {
			return fmt.Errorf("exit %d: %s %s", code, out, serr)
		}
		return nil
	})
}
