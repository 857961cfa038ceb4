package access

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// electedState is a master's state that becomes the leader when told:
// its writes (Mutate, the leader's only) land in kv.
type electedState struct {
	leader atomic.Bool
	mu     sync.Mutex
	kv     map[string][]byte
}

func (s *electedState) IsLeader() bool { return s.leader.Load() }
func (s *electedState) Term() uint64   { return 3 }
func (s *electedState) Mutate(_ context.Context, muts []raftfsm.Mutation) error {
	if !s.leader.Load() {
		return errors.New("not the leader")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range muts {
		if m.Op == raftfsm.OpDelete {
			delete(s.kv, m.Key)
		} else {
			s.kv[m.Key] = m.Value
		}
	}
	return nil
}

func (s *electedState) keys(prefix string) (out []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.kv {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// standbyTrail runs a trail over st whose records go through send while
// st does not lead.
func standbyTrail(t *testing.T, st *electedState, send func([]*adminpb.AuditRecord) error) *Trail {
	t.Helper()
	return runningTrailWith(t, st, clock.NewManual(time.Unix(1_000_000, 0)), 1000, func(c *TrailConfig) {
		c.Established, c.Send = st.IsLeader, send
	})
}

// TestStandbyRecordsWrittenOnceItLeads: a standby's records whose Send
// finds the standby elected meanwhile (ErrLeading) are numbered again and
// written as the leader's, once; were it to find that again (leadership
// gone as fast), the records fail with Send's answer instead of going
// round for ever.
func TestStandbyRecordsWrittenOnceItLeads(t *testing.T) {
	for _, stays := range []bool{true, false} {
		t.Run(fmt.Sprintf("leads after=%v", stays), func(t *testing.T) {
			st := &electedState{kv: map[string][]byte{}}
			var sends atomic.Int32
			l := standbyTrail(t, st, func(recs []*adminpb.AuditRecord) error {
				sends.Add(1)
				st.leader.Store(stays) // elected as it sent (and, if not stays, gone again)
				return fmt.Errorf("%w (the leader refused them)", ErrLeading)
			})
			err := l.Append(context.Background(), &adminpb.AuditRecord{Principal: "client/carol", Method: "SnapshotSave", Code: "OK"})
			stored := st.keys(AuditPrefix)
			if stays {
				if err != nil || sends.Load() != 1 || len(stored) != 1 {
					t.Fatalf("Append: %v, %d sends, stored %v; want committed as the leader's after one send", err, sends.Load(), stored)
				}
				return
			}
			if !errors.Is(err, ErrLeading) || sends.Load() != 2 || len(stored) != 0 {
				t.Fatalf("Append: %v, %d sends, stored %v; want ErrLeading after two sends, nothing stored", err, sends.Load(), stored)
			}
		})
	}
}

// TestRecordsElectedMidSendKeepTheirOrder: a record appended while an
// earlier one's Send is in flight is numbered after it, though the
// earlier one is numbered again as the leader's once Send finds this
// master elected: the next batch is taken only once the write before it
// is done.
func TestRecordsElectedMidSendKeepTheirOrder(t *testing.T) {
	st := &electedState{kv: map[string][]byte{}}
	sending, release := make(chan struct{}), make(chan struct{})
	l := standbyTrail(t, st, func(recs []*adminpb.AuditRecord) error {
		close(sending)
		<-release
		st.leader.Store(true)
		return fmt.Errorf("%w (test)", ErrLeading)
	})

	errs := make(chan error, 2)
	go func() {
		errs <- l.Append(context.Background(), &adminpb.AuditRecord{Principal: "a", Method: "SnapshotSave", Code: "OK"})
	}()
	<-sending
	go func() {
		errs <- l.Append(context.Background(), &adminpb.AuditRecord{Principal: "b", Method: "SnapshotSave", Code: "OK"})
	}()
	testwait.For(t, 10*time.Second, "b queued", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending) == 1
	})
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	keys := st.keys(AuditPrefix)
	slices.Sort(keys)
	var order []string
	for _, k := range keys {
		var rec adminpb.AuditRecord
		if err := proto.Unmarshal(st.kv[k], &rec); err != nil {
			t.Fatal(err)
		}
		order = append(order, rec.GetPrincipal())
	}
	if !slices.Equal(order, []string{"a", "b"}) {
		t.Fatalf("numbered in the order %v (keys %v), want a then b", order, keys)
	}
}
