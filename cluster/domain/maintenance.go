package domain

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
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

// CheckSubmissions refuses new submissions while maintenance mode is on,
// with FAILED_PRECONDITION: the refusal lasts until an operator ends it,
// so retrying (which UNAVAILABLE would invite) cannot help. The admin API
// asks it on the leader before every submission it is sent, except repair
// calls; lock releases and heartbeats submit nothing.
func (d *Domain) CheckSubmissions() error {
	r, err := d.fsmReader()
	if err != nil {
		return err
	}
	m, err := getMaintenance(r)
	if err != nil || !m.On {
		return err
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

// applyMaintenance brings the leader services in line with maintenance
// mode m: while it is on, the dispatcher is paused and procedures about to
// dispatch suspend on an event that its end wakes.
func (s *services) applyMaintenance(m Maintenance) {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	if m.On {
		if s.maintEv == nil {
			s.maintEv = scheduler.NewEvent("maintenance mode to end")
		}
		s.disp.Pause()
		return
	}
	s.disp.Resume()
	if ev := s.maintEv; ev != nil {
		s.maintEv = nil
		s.x.Wake(ev)
	}
}

// dispatchPaused returns the event to wait on while maintenance mode
// pauses dispatch, nil when it does not.
func (s *services) dispatchPaused() *scheduler.Event {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	return s.maintEv
}

// setMaintenance commits maintenance mode m and applies it.
func (s *services) setMaintenance(ctx context.Context, m Maintenance) error {
	if err := s.commit(ctx, raftfsm.Put(MaintenanceKey, mustJSON(m))); err != nil {
		return err
	}
	s.applyMaintenance(m)
	s.log.Warn("maintenance mode", "on", m.On, "by", m.By, "reason", m.Reason)
	return nil
}

// SetMaintenance turns maintenance mode on or off (see the package doc).
// The state is replicated, so it survives failovers and restarts.
func (d *Domain) SetMaintenance(ctx context.Context, on bool, reason string, o catalog.RepairOptions) (catalog.RepairResult, error) {
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
			return repairPlan{noop: true, summary: "maintenance mode is already " + cur.describe()}, nil
		}
		summary := "turn maintenance mode on: the leader sends no region open or close (procedures that would, wait), and new procedures are refused until it is turned off"
		if !on {
			summary = fmt.Sprintf("turn maintenance mode off (it is %s): dispatch resumes and new procedures are accepted", cur.describe())
		}
		return repairPlan{summary: summary, act: func(ctx context.Context) (string, error) {
			m := Maintenance{On: on, Since: d.cfg.Clock.Now().UTC(), By: callerName(o.Caller), Reason: reason}
			if err := svc.setMaintenance(ctx, m); err != nil {
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
