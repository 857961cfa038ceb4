package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/testwait"
)

// submitAndWait submits procedures of typ with args under nonces
// prefix-0.. and waits until all are terminal, failing t unless each ends
// want. It returns the ids.
func submitAndWait(t *testing.T, ctx context.Context, cl *client.Client, prefix string, n int, typ string, args map[string]string, want string) []uint64 {
	t.Helper()
	ids := make([]uint64, n)
	for i := range n {
		id, _, err := submitRetrying(ctx, cl, typ, args, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for _, id := range ids {
		state, _, errText, err := terminalWithin(ctx, cl, id, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if state != want {
			t.Errorf("%s %d ended %s (%s), want %s", typ, id, state, errText, want)
		}
	}
	return ids
}

var restartLine = regexp.MustCompile(`restarting from existing raft state:.*fsm_wal_index=(\d+).*snapshot_restore=(\w+)`)

// TestRestartCatchesUpFromWAL SIGKILLs a follower, runs more work without
// it, and restarts it with the same command line. It asserts that the node
// came back with the state of its local WAL (its first /status already
// shows at least the index it had applied before the kill, and its log
// says it started from fsm_wal_index ≥ that index with
// snapshot_restore=false, never restoring or installing a Raft snapshot),
// that it then converges to the leader's applied index, and (when the
// agents serve /debug/domain) that its domain state equals the others'.
func TestRestartCatchesUpFromWAL(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 90*time.Second)
	cl := c.Client()
	sleep := map[string]string{"steps": "3", "delay": "10ms"}
	submitAndWait(t, ctx, cl, "before", 10, "sleep", sleep, client.StateSuccess)

	if _, err := c.Converge(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f := c.Followers(leader)[0]
	before, err := c.Status(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if before.FSMWALIndex == 0 || before.FSMWALIndex != before.FSMIndex {
		t.Fatalf("%s before the kill: fsm_wal_index %d, fsm_index %d: want the WAL to hold everything applied", f, before.FSMWALIndex, before.FSMIndex)
	}
	c.Kill(f)

	more := submitAndWait(t, ctx, cl, "during", 30, "sleep", sleep, client.StateSuccess)
	more = append(more, submitAndWait(t, ctx, cl, "fan", 3, "fanout", map[string]string{"children": "2", "steps": "2", "delay": "10ms"}, client.StateSuccess)...)
	lst, err := c.Status(ctx, c.WaitLeader(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if lst.FSMIndex <= before.FSMIndex {
		t.Fatalf("leader's fsm_index %d did not move past the follower's %d", lst.FSMIndex, before.FSMIndex)
	}

	c.Restart(f)
	var first *int64
	for first == nil {
		st, err := c.Status(ctx, f)
		if err == nil {
			v := int64(st.FSMIndex)
			first = &v
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted %s never answered /status: %v", f, err)
		}
		// A fixed 5 ms, not testwait's backoff: the assertion is about the
		// first answer, which a slower poll could miss while the node
		// catches up from the leader.
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	if uint64(*first) < before.FSMWALIndex {
		t.Errorf("restarted %s first reported fsm_index %d, below the %d its WAL held: it did not load its WAL", f, *first, before.FSMWALIndex)
	}

	idx, err := c.Converge(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if idx < lst.FSMIndex {
		t.Errorf("converged at %d, below the leader's %d before the restart", idx, lst.FSMIndex)
	}
	log := c.CurrentLog(f)
	m := restartLine.FindStringSubmatch(log)
	switch {
	case m == nil:
		t.Errorf("%s's log lacks the 'restarting from existing raft state' line (log: %s)", f, c.Node(f).LogPath)
	default:
		w, _ := strconv.ParseUint(m[1], 10, 64)
		if w < before.FSMWALIndex {
			t.Errorf("%s restarted from fsm_wal_index %d, want ≥ %d", f, w, before.FSMWALIndex)
		}
		if m[2] != "false" {
			t.Errorf("%s restarted with snapshot_restore=%s, want false: the WAL covers its state", f, m[2])
		}
		t.Logf("%s restarted from its WAL at index %d (leader was at %d); converged at %d", f, w, lst.FSMIndex, idx)
	}
	for _, bad := range []string{"restored from snapshot", "Installed remote snapshot"} {
		if strings.Contains(log, bad) {
			t.Errorf("%s's log says %q: it caught up from a snapshot, not from its WAL and the Raft log", f, bad)
		}
	}

	t.Run("DomainEqual", func(t *testing.T) {
		doms := domainOrSkip(t, ctx, c)
		if len(doms) != 3 {
			t.Fatalf("domain state from %d nodes, want 3", len(doms))
		}
		ref := sameDomains(t, doms)
		for k, v := range ref {
			if v != "1" {
				t.Errorf("effect %s = %q, want \"1\"", k, v)
			}
		}
		for _, id := range more {
			// Every procedure run while f was down has its first step.
			if _, ok := ref[fmt.Sprintf("effects/%d/0", id)]; !ok {
				t.Errorf("procedure %d, run while %s was down, has no effects/%d/0 key", id, f, id)
			}
		}
	})
}

// TestGracefulLeaderHandover SIGTERMs the leader while procedures run. It
// asserts that the agent exits 0 after transferring leadership (its log
// says so), that another node leads, and that every procedure still ends
// SUCCESS with no error: a graceful stop fails nothing.
func TestGracefulLeaderHandover(t *testing.T) {
	ctx, c, old := leadingCluster(t, 3, 90*time.Second)
	cl := c.Client()

	var ids []uint64
	for i := range 30 {
		typ, args := "sleep", map[string]string{"steps": "5", "delay": "50ms"}
		if i%10 == 0 {
			typ, args = "fanout", map[string]string{"children": "3", "steps": "3", "delay": "50ms"}
		}
		id, _, err := submitRetrying(ctx, cl, typ, args, fmt.Sprintf("gh-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// SIGTERM while procedures are mid-flight: one has moved on since its
	// submission and is not finished.
	testwait.ForNil(t, 30*time.Second, "a procedure mid-flight", func() error {
		ps, err := cl.ListAll(ctx, client.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range ps {
			if !client.Terminal(p.GetState()) && p.GetUpdatedUnixMs() > p.GetSubmittedUnixMs() {
				return nil
			}
		}
		return fmt.Errorf("none of %d procedures has moved on since its submission and is unfinished", len(ps))
	})

	// Watch for the next leader while the old one stops.
	var (
		wg        sync.WaitGroup
		newLeader string
		readyIn   time.Duration
		lerr      error
	)
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
		defer lcancel()
		lerr = testwait.Err(30*time.Second, "a ready leader other than "+old, func() error {
			id, err := c.AwaitLeader(lctx)
			if err != nil {
				return err
			}
			if id == old {
				return fmt.Errorf("%s still leads", old)
			}
			newLeader, readyIn = id, time.Since(start)
			return nil
		})
	}()
	code := c.Term(old, 30*time.Second)
	exitedIn := time.Since(start)
	wg.Wait()
	if code != 0 {
		t.Errorf("old leader %s exited %d after SIGTERM, want 0", old, code)
	}
	if lerr != nil {
		t.Fatalf("no new leader: %v", lerr)
	}
	t.Logf("SIGTERM %s: exited after %v; %s leads, ready after %v", old, exitedIn.Round(time.Millisecond), newLeader, readyIn.Round(time.Millisecond))
	if log := c.CurrentLog(old); !strings.Contains(log, "leadership transferred") {
		t.Errorf("%s's log does not say 'leadership transferred' (log: %s)", old, c.Node(old).LogPath)
	}

	for _, id := range ids {
		state, _, errText, err := terminalWithin(ctx, cl, id, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if state != client.StateSuccess || errText != "" {
			t.Errorf("procedure %d ended %s (error %q) across a graceful handover, want SUCCESS", id, state, errText)
		}
	}
	// The stopped node rejoins with the same command line.
	c.Restart(old)
	if _, err := c.Converge(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
