package admin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// unsequenced is a node's backend whose trail numbers its records before
// proposing them, as before the records were carried: the field hides
// nodeBackend's MutateNumbered, so the submissions' records take the
// trail's own entries (begun PENDING, their outcome written over them).
type unsequenced struct {
	nodeBackend
	MutateNumbered struct{}
}

// auditPuts collects every audit record node's FSM applies, in order.
type auditPuts struct {
	mu   sync.Mutex
	recs []*adminpb.AuditRecord
}

func watchAudit(t *testing.T, n *cluster.Node) *auditPuts {
	a := &auditPuts{}
	stop := n.FSM().Observe(&raftfsm.PutObserver{Prefixes: []string{access.AuditPrefix}, Put: func(k string, v []byte) {
		// A put of a group is a put of each of its records.
		stored := access.StoredRecords(strings.TrimPrefix(k, access.AuditPrefix), v)
		if len(stored) == 0 {
			t.Errorf("audit put %q holds no record", k)
		}
		for _, sr := range stored {
			r := &adminpb.AuditRecord{}
			if err := proto.Unmarshal(sr.Value, r); err != nil {
				t.Errorf("audit put: %v", err)
			}
			a.mu.Lock()
			a.recs = append(a.recs, r)
			a.mu.Unlock()
		}
	}})
	t.Cleanup(stop)
	return a
}

func (a *auditPuts) of(method string) []*adminpb.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*adminpb.AuditRecord
	for _, r := range a.recs {
		if r.GetMethod() == method {
			out = append(out, r)
		}
	}
	return out
}

// audited is a nodeSetup keeping an audit trail (access control off:
// calls are recorded under their address).
func audited(_ int, _ string, cfg *Config) grpc.DialOption {
	cfg.Access = &Access{}
	return nil
}

// submitThree submits to an audited trio on backend once at the leader,
// once through a standby (forwarded) and once with an unknown type, and
// returns the SubmitProcedure records a standby applied (every version
// of each) and the trail's, once final.
func submitThree(t *testing.T, backend func(i int, n *cluster.Node) Backend) (applied, final []*adminpb.AuditRecord) {
	nodes := startClusterOn(t, 3, steadyRaftTimeout, audited, backend)
	li := converged(t, nodes)
	sb := (li + 1) % 3
	puts := watchAudit(t, nodes[sb].node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, c := range []adminpb.AdminClient{nodes[li].cl, nodes[sb].cl} {
		if _, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "t", Nonce: fmt.Sprint("n", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nodes[li].cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "no-such-type", Owner: "t", Nonce: "bad"}); err == nil {
		t.Fatal("an unknown type submitted")
	}
	// Written apart, a record begins PENDING and its outcome follows the
	// answer (no caller waits for it): list until none is pending.
	testwait.For(t, 10*time.Second, "the trail's SubmitProcedure records final", func() bool {
		final = listAudit(t, ctx, nodes[sb].cl, &adminpb.ListAuditRequest{Method: "SubmitProcedure"})
		if len(final) < 3 {
			return false
		}
		for _, r := range final {
			if r.GetCode() == access.AuditPending {
				return false
			}
		}
		return true
	})
	testwait.For(t, 10*time.Second, "the standby applied what the trail holds", func() bool { return len(puts.of("SubmitProcedure")) >= len(final) })
	return puts.of("SubmitProcedure"), final
}

// TestSubmissionCarriesItsAuditRecord: a submission the leader serves
// has its record written once, final, by the entry that commits the
// submission (never PENDING first); a forwarded one and a refused one
// alike; and the trail holds the same records, field for field, as when
// the trail writes them in entries of its own.
func TestSubmissionCarriesItsAuditRecord(t *testing.T) {
	applied, carried := submitThree(t, func(_ int, n *cluster.Node) Backend { return NodeBackend(n) })
	if len(carried) != 3 {
		t.Fatalf("trail: %d SubmitProcedure records, want 3:\n%s", len(carried), auditText(carried))
	}
	if len(applied) != 3 {
		t.Fatalf("the standby applied %d SubmitProcedure puts, want 3 (one each, final):\n%s", len(applied), auditText(applied))
	}
	for _, r := range applied {
		if r.GetCode() == access.AuditPending {
			t.Fatalf("a PENDING record written:\n%s", auditText(applied))
		}
	}
	_, separate := submitThree(t, func(_ int, n *cluster.Node) Backend { return unsequenced{nodeBackend: NodeBackend(n).(nodeBackend)} })
	if len(separate) != 3 {
		t.Fatalf("trail without carrying: %d SubmitProcedure records, want 3:\n%s", len(separate), auditText(separate))
	}
	for i := range carried {
		a, b := proto.Clone(carried[i]).(*adminpb.AuditRecord), proto.Clone(separate[i]).(*adminpb.AuditRecord)
		for _, r := range []*adminpb.AuditRecord{a, b} {
			// Where and when: the clusters' own.
			r.Id, r.AtUnixMs, r.CommittedUnixMs, r.Node, r.Peer, r.Via = "", 0, 0, "", "", ""
		}
		if !proto.Equal(a, b) {
			t.Errorf("record %d carried:\n%v\nwritten apart:\n%v", i, a, b)
		}
		if want := carried[i].GetAtUnixMs(); carried[i].GetCommittedUnixMs() < want {
			t.Errorf("record %d committed (%d) before the call came (%d)", i, carried[i].GetCommittedUnixMs(), want)
		}
	}
}

// gate holds the first submission's insert, once armed, before or after
// its entry commits, for a test to kill the leader there.
type gate struct {
	armed   atomic.Bool
	after   bool
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gate) hold() {
	if g.armed.Load() {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
}

// fullStore is what the executor uses of its store (cluster's fencedStore).
type fullStore interface {
	store.LateMutator
	store.DeleteMutator
	store.Reader
}

// gatedStore is an executor's store with g at its submissions.
type gatedStore struct {
	fullStore
	g *gate
}

func (s gatedStore) InsertAndMutateLate(proc store.Proc, children []store.Proc, late func() []store.Mutation) error {
	if !s.g.after {
		s.g.hold()
	}
	err := s.fullStore.InsertAndMutateLate(proc, children, late)
	if s.g.after {
		s.g.hold()
	}
	return err
}

// TestCarriedRecordAndSubmissionCommitTogether: the leader dies between a
// submission and its answer, its entry committed or not yet proposed:
// the new leader has both the procedure and its record, or neither.
func TestCarriedRecordAndSubmissionCommitTogether(t *testing.T) {
	for _, after := range []bool{true, false} {
		t.Run(fmt.Sprint("committed=", after), func(t *testing.T) {
			g := &gate{after: after, reached: make(chan struct{}), release: make(chan struct{})}
			nodes := startClusterConf(t, 3, steadyRaftTimeout, audited, func(_ int, n *cluster.Node) Backend { return NodeBackend(n) }, func(_ int, c *cluster.Config) {
				c.Executor = func(pc *procedure.Config) {
					if fs, ok := pc.Store.(fullStore); ok {
						pc.Store = gatedStore{fullStore: fs, g: g}
					} else {
						t.Errorf("the executor's store %T lacks what the test wraps", pc.Store)
					}
				}
			})
			li := converged(t, nodes)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			g.armed.Store(true)
			answered := make(chan error, 1)
			go func() {
				_, err := nodes[li].cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "t", Nonce: "crash"})
				answered <- err
			}()
			select {
			case <-g.reached:
			case <-ctx.Done():
				t.Fatal("the submission never reached the store")
			}
			nodes[li].node.Kill()
			close(g.release)
			// Committed, the answer may still get out of the killed
			// node's server (its record committed with it); not
			// proposed, it must not.
			if err := <-answered; err == nil && !after {
				t.Fatal("a submission answered OK whose entry was never proposed")
			}
			sb := (li + 1) % 3
			others := []*testNode{nodes[sb], nodes[(li+2)%3]}
			converged(t, others)
			recs := listAudit(t, ctx, nodes[sb].cl, &adminpb.ListAuditRequest{Method: "SubmitProcedure"})
			var ok []*adminpb.AuditRecord
			for _, r := range recs {
				if r.GetCode() == "OK" {
					ok = append(ok, r)
				}
			}
			procs, err := nodes[sb].cl.ListProcedures(ctx, &adminpb.ListProceduresRequest{Type: "sleep"})
			if err != nil {
				t.Fatal(err)
			}
			var sleeps []uint64
			for _, p := range procs.GetProcedures() {
				if p.GetType() == "sleep" {
					sleeps = append(sleeps, p.GetId())
				}
			}
			switch {
			case after && (len(ok) != 1 || len(sleeps) != 1 || len(ok[0].GetProcIds()) != 1 || ok[0].GetProcIds()[0] != sleeps[0]):
				t.Fatalf("committed, then the leader died: procedures %v, OK records:\n%s", sleeps, auditText(ok))
			case !after && (len(ok) != 0 || len(sleeps) != 0):
				t.Fatalf("the leader died before proposing: procedures %v, OK records:\n%s", sleeps, auditText(ok))
			}
			if strings.Contains(auditText(recs), access.AuditPending) {
				t.Fatalf("a PENDING record:\n%s", auditText(recs))
			}
		})
	}
}
