package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// fixture is a 3-master, 3-region-server cluster whose masters serve the
// console, holding what the pages should show: a table, a long sleep, and
// an external lock with a procedure queued behind it.
type fixture struct {
	c       *clustertest.Cluster
	cl      *client.Client
	leader  *clustertest.Master
	standby *clustertest.Master
	// createID made the table t1 (4 regions; finished, with children).
	createID uint64
	// sleepID sleeps for an hour after its first step: it runs until
	// aborted.
	sleepID uint64
	// fanoutID waits for its 3 children, each sleeping for an hour.
	fanoutID uint64
	// lockID is alice's external lock on table default:t1; disableID
	// (DisableTable t1) waits behind it.
	lockID, disableID uint64
}

const (
	sleepOwner  = "console-test"
	lockHolder  = "alice"
	lockPurpose = "maintenance <window>" // escaped on every page that shows it
)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// The tests walk "the leader's" and "a standby's" pages one after the
	// other: a leadership change on a loaded machine must not move them.
	c := clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 3, HTTP: true, SteadyLeader: true})
	f := &fixture{c: c, cl: c.Client()}
	li, _ := c.WaitLeader()
	f.leader = c.Master(li)
	f.standby = c.Master((li + 1) % 3)
	ctx := context.Background()
	var err error
	if f.createID, err = f.cl.CreateTable(ctx, "", "t1", 4, ""); err != nil {
		t.Fatal(err)
	}
	if p, err := f.cl.Wait(ctx, f.createID); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("create table: %v %v", p.GetState(), err)
	}
	if f.sleepID, err = f.cl.Submit(ctx, "sleep", map[string]string{"steps": "3", "delay": "1h"}, "", sleepOwner, 0); err != nil {
		t.Fatal(err)
	}
	if f.fanoutID, err = f.cl.Submit(ctx, "fanout", map[string]string{"children": "3", "steps": "2", "delay": "1h"}, "", sleepOwner, 0); err != nil {
		t.Fatal(err)
	}
	lk, err := f.cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: client.LockTable, Names: []string{"default:t1"},
		Exclusive: true, Holder: lockHolder, Description: lockPurpose, LeaseMs: time.Hour.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	f.lockID = lk.GetLockId()
	c.WaitForNil("the external lock acquired", func() error {
		r, err := f.cl.LockHeartbeat(ctx, f.lockID)
		if err == nil && r.GetState() != client.LockAcquired {
			return errState(r.GetState())
		}
		return err
	})
	if f.disableID, err = f.cl.DisableTable(ctx, "", "t1", ""); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the disable queued behind the lock, the sleep suspended", func() bool {
		locks, err := f.cl.ListLocks(ctx, f.disableID)
		if err != nil {
			return false
		}
		waiting := false
		for _, e := range locks.GetLocks() {
			for _, w := range e.GetWaiters() {
				waiting = waiting || w.GetProcId() == f.disableID
			}
		}
		p, err := f.cl.Get(ctx, f.sleepID)
		if err != nil || p.GetState() != client.StateWaitingTimeout {
			return false
		}
		fan, err := f.cl.Get(ctx, f.fanoutID)
		return waiting && err == nil && len(fan.GetChildren()) == 3
	})
	// The standby's console links to the leader's once both registered.
	// The leader is looked up again each time: on a loaded machine
	// leadership can move while the fixture is built, and the tests mean
	// "the leader" and "a standby", not the first master that led.
	c.WaitFor("the masters' HTTP addresses registered", func() bool {
		li, x := c.LeaderNow()
		if x == nil {
			return false
		}
		f.leader, f.standby = c.Master(li), c.Master((li+1)%3)
		st, err := f.standby.Admin().ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
		return err == nil && st.GetLeaderHttpAddress() == f.leader.HTTPAddr() && st.GetHttpAddress() == f.standby.HTTPAddr()
	})
	return f
}

type errState string

func (e errState) Error() string { return "state " + string(e) }

// get fetches path from master m's HTTP port.
func get(t *testing.T, m *clustertest.Master, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + m.HTTPAddr() + path)
	code, body, _ := readAnswer(t, "GET "+path, resp, err)
	return code, body
}

// readAnswer reads the answer to a request named what, failing the test
// if the request (err) or the read failed, and returns its status, body
// and the URL it came from.
func readAnswer(t *testing.T, what string, resp *http.Response, err error) (int, string, *url.URL) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Request.URL
}

// mustContain fails unless body holds every one of wants.
func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	missing := false
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s: %q missing", what, w)
			missing = true
		}
	}
	if missing {
		t.Logf("%s:\n%s", what, body)
		t.FailNow()
	}
}
