package domain

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/scheduler"
)

// MaintenanceKey is the key of maintenance mode in the replicated state.
const MaintenanceKey = "maintenance"

// Maintenance is the value at MaintenanceKey: whether maintenance mode is
// on, and when, by whom and why it was last turned on or off. An absent
// key is off.
type Maintenance struct {
	On     bool      `json:"on"`
	Since  time.Time `json:"since"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

func (m Maintenance) catalog() catalog.Maintenance {
	return catalog.Maintenance{On: m.On, Since: m.Since, By: m.By, Reason: m.Reason}
}

// describe is "on since 2024-01-02T03:04:05Z by ann@host:12 (127.0.0.1:5000): upgrading rs2".
func (m Maintenance) describe() string {
	word := "off"
	if m.On {
		word = "on"
	}
	if m.Since.IsZero() {
		return word
	}
	s := fmt.Sprintf("%s since %s", word, m.Since.UTC().Format(time.RFC3339))
	if m.By != "" {
		s += " by " + m.By
	}
	if m.Reason != "" {
		s += ": " + m.Reason
	}
	return s
}

// maintenanceRecheck is how often a procedure waiting for maintenance mode
// to end looks again, should the wake at its end be missed (a leadership
// change in between: the new leader's services start paused or not, from
// the replicated state).
const maintenanceRecheck = 5 * time.Second

func getMaintenance(r reader) (Maintenance, error) {
	var m Maintenance
	_, err := getJSON(r, MaintenanceKey, &m)
	return m, err
}

// Maintenance is maintenance mode as this node's replicated state holds
// it (any master; the admin API makes the read linearizable if asked).
func (d *Domain) Maintenance() (catalog.Maintenance, error) {
	r, err := d.fsmReader()
	if err != nil {
		return catalog.Maintenance{}, err
	}
	m, err := getMaintenance(r)
	return m.catalog(), err
}

// CheckSubmissions refuses a new submission while maintenance mode is on,
// with FAILED_PRECONDITION: the refusal lasts until an operator ends it,
// so retrying (which UNAVAILABLE would invite) cannot help. The admin API
// asks it on the leader before every submission it is sent, except repair
// calls (AcquireLock asks it itself); lock releases and heartbeats submit
// nothing.
//
// The retry of a submission that got through is not new: if executor x
// knows owner and nonce, Submit answers with the procedure the first
// attempt created (it runs once the mode ends), and so the check lets it
// by. Refused, a client whose first answer was lost would submit the work
// again later under a new nonce, and it would run twice.
func (d *Domain) CheckSubmissions(x catalog.Executor, owner, nonce string) error {
	r, err := d.fsmReader()
	if err != nil {
		return err
	}
	m, err := getMaintenance(r)
	if err != nil || !m.On {
		return err
	}
	if _, ok := x.LookupNonce(owner, nonce); ok {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"%s: new procedures are refused (%s); 'baton cluster maintenance off' ends it", catalog.MaintenanceRefusal, m.describe())
}

// maintenanceOn reads maintenance mode for the baton_maintenance_mode
// gauge: 1 while on, 0 otherwise (also while the node is not attached).
func (d *Domain) maintenanceOn() float64 {
	r, err := d.fsmReader()
	if err != nil {
		return 0
	}
	if m, err := getMaintenance(r); err == nil && m.On {
		return 1
	}
	return 0
}

// pauseMaintenance is maintenance mode's reason to pause dispatch (a
// restored cluster's hold is another: restore_hold.go).
const pauseMaintenance = "maintenance mode"

// applyMaintenance brings the leader services in line with maintenance
// mode m: while it is on, the dispatcher is paused and procedures about to
// dispatch suspend on an event that its end wakes.
func (s *services) applyMaintenance(m Maintenance) {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	s.applyMaintenanceLocked(m)
}

func (s *services) applyMaintenanceLocked(m Maintenance) {
	if m.On {
		if s.maintEv == nil {
			s.maintEv = scheduler.NewEvent("maintenance mode to end")
		}
		s.disp.Pause(pauseMaintenance)
		return
	}
	s.disp.Resume(pauseMaintenance)
	if ev := s.maintEv; ev != nil {
		s.maintEv = nil
		s.x.Wake(ev)
	}
}

// syncMaintenanceLocked applies maintenance mode as the replicated state
// holds it, unless a maintenance write is still unresolved: that write's
// resolution syncs again, and until then dispatch stays as its start left
// it (paused for "on"). A state that cannot be read pauses, as at
// leadership start.
func (s *services) syncMaintenanceLocked() {
	if s.maintWrites > 0 {
		return
	}
	m, err := getMaintenance(s.reader())
	if err != nil {
		s.log.Error("reading maintenance mode; dispatch paused until it is set again", "error", err)
		m.On = true
	}
	s.applyMaintenanceLocked(m)
}

// syncMaintenance is syncMaintenanceLocked for callers without maintMu: a
// repair call that finds the mode already as asked re-applies it, so that
// a retry always leaves this leader's dispatch as the state says.
func (s *services) syncMaintenance() {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	s.syncMaintenanceLocked()
}

// dispatchPaused returns the event to wait on while maintenance mode
// pauses dispatch, nil when it does not.
func (s *services) dispatchPaused() *scheduler.Event { return locked.Load(&s.maintMu, &s.maintEv) }

// setMaintenance writes maintenance mode m, and this leader's dispatch
// follows the replicated state, not the call: the write is bounded by the
// apply timeout, not by the caller's context, and whenever it resolves
// (committed, refused, leadership lost; answered to the caller or not)
// dispatch is set from what the state then says. Turning it on pauses
// before writing, so nothing is sent between the entry's commit and the
// pause; a write that does not land leaves it paused only if the state
// still says on.
func (s *services) setMaintenance(m Maintenance) error {
	s.maintMu.Lock()
	s.maintWrites++
	if m.On {
		s.applyMaintenanceLocked(m)
	}
	s.maintMu.Unlock()
	resolved := func() {
		s.maintMu.Lock()
		defer s.maintMu.Unlock()
		s.maintWrites--
		if !s.isStopped() {
			s.syncMaintenanceLocked()
		}
	}
	data, err := raftfsm.EncodeFencedProcBatch(s.term, raftfsm.Write{Mutations: []raftfsm.Mutation{raftfsm.Put(MaintenanceKey, mustJSON(m))}})
	if err != nil {
		resolved()
		return err
	}
	f := s.n.Raft().Apply(data, s.d.cfg.ApplyTimeout)
	done := make(chan error, 1)
	s.background(func() {
		// Not bounded but by the write itself (or the services' end): the
		// sync must follow the entry even once the caller stopped waiting.
		err := s.awaitRaft(context.Background(), "maintenance write", f)
		if rerr, ok := f.Response().(error); err == nil && ok && rerr != nil {
			err = fmt.Errorf("maintenance write refused: %w", rerr)
		}
		resolved()
		done <- err
	})
	timeout, stop := s.d.after(s.d.cfg.ApplyTimeout)
	defer stop()
	select {
	case err = <-done:
	case <-timeout:
		err = fmt.Errorf("maintenance write not confirmed within %v; this leader's dispatch follows it once it resolves: %w",
			s.d.cfg.ApplyTimeout, context.DeadlineExceeded)
	case <-s.stopCh:
		err = fmt.Errorf("maintenance write: %w", cluster.ErrNotLeader)
	}
	if err != nil {
		return err
	}
	s.log.Warn("maintenance mode", "on", m.On, "by", m.By, "reason", m.Reason)
	return nil
}

// SetMaintenance turns maintenance mode on or off (see the package doc).
// The state is replicated, so it survives failovers and restarts. Once
// the call has started to act, the caller leaving (ctx) changes nothing:
// the write and the dispatcher's switch happen, or not, together (see
// setMaintenance).
func (d *Domain) SetMaintenance(ctx context.Context, on bool, reason string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	if err := checkLen("cluster maintenance", "reason", reason, MaxReasonLen); err != nil {
		return catalog.RepairResult{}, err
	}
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.RepairResult{}, err
	}
	action, args := "maintenance off", map[string]string{}
	if on {
		action = "maintenance on"
	}
	if reason != "" {
		args["reason"] = reason
	}
	out := catalog.RepairResult{DryRun: o.DryRun}
	seq, summary, err := svc.repair(ctx, action, args, o, func() (repairPlan, error) {
		cur, err := getMaintenance(svc.reader())
		if err != nil {
			return repairPlan{}, err
		}
		c := cur.catalog()
		out.Maintenance = &c
		if cur.On == on {
			if !o.DryRun {
				// A retry of a call whose answer was lost: this leader's
				// dispatch may not have followed yet.
				svc.syncMaintenance()
			}
			return repairPlan{noop: true, summary: "maintenance mode is already " + cur.describe()}, nil
		}
		summary := "turn maintenance mode on: the leader sends no region open or close (procedures that would, wait), and new procedures are refused until it is turned off"
		if !on {
			summary = fmt.Sprintf("turn maintenance mode off (it is %s): dispatch resumes and new procedures are accepted", cur.describe())
		}
		return repairPlan{summary: summary, act: func(context.Context) (string, error) {
			m := Maintenance{On: on, Since: d.cfg.Clock.Now().UTC(), By: callerName(o.Caller), Reason: reason}
			if err := svc.setMaintenance(m); err != nil {
				return "", err
			}
			c := m.catalog()
			out.Maintenance = &c
			return "maintenance mode " + m.describe(), nil
		}}, nil
	})
	out.Summary, out.Record = summary, seq
	return out, err
}
