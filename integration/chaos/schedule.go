package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
)

// Step is one fault of a run's schedule. A Plan's steps are drawn up
// front from the seed, so the seed alone names the whole schedule: which
// fault, on whom, when and for how long.
//
// The master faults run one after the other, and so do the region server
// faults (two lanes side by side, see Nemesis): a step starts at AtMS after
// the workload started, or when the step before it in its lane is over if
// that is later (a fault that took longer than planned delays the next,
// and the record of the run says so).
type Step struct {
	AtMS  int64  `json:"at_ms"` // offset from the workload's start
	Fault string `json:"fault"` // one of FaultKinds
	// Target is "leader" (whichever master leads when the step starts),
	// or a node: a master ("n1") or a region server ("rs2"), by the
	// harness's names.
	Target string `json:"target"`
	// HoldMS is how long the fault stays once it took effect (a process
	// paused, a master cut off, a region server dead); 0 for the faults
	// healed as soon as they took effect (a leader kill, a region server
	// cut held until the masters expired it).
	HoldMS int64 `json:"hold_ms"`

	// The record of a run adds what happened; a replay ignores these.
	PlannedAtMS *int64 `json:"planned_at_ms,omitempty"` // AtMS is then when it started
	On          string `json:"on,omitempty"`            // the node Target named then
	Outcome     string `json:"outcome,omitempty"`
	TookMS      int64  `json:"took_ms,omitempty"` // from its start until healed
}

// At is the step's offset from the workload's start.
func (s Step) At() time.Duration { return time.Duration(s.AtMS) * time.Millisecond }

// Hold is how long the fault stays once it took effect.
func (s Step) Hold() time.Duration { return time.Duration(s.HoldMS) * time.Millisecond }

func (s Step) String() string {
	str := fmt.Sprintf("+%v %s on %s", s.At(), s.Fault, s.Target)
	if s.HoldMS > 0 {
		str += fmt.Sprintf(" held %v", s.Hold())
	}
	return str
}

// TargetLeader is the target of the faults aimed at the leader of the
// moment.
const TargetLeader = "leader"

// Plan is a run's whole schedule and what else a replay needs: the seed
// (which the clients' random choices use too) and the run's bounds.
type Plan struct {
	Test          string         `json:"test"`
	Seed          uint64         `json:"seed,string"` // a string: past 2^53, JSON tools round numbers
	MaxDurationMS int64          `json:"max_duration_ms"`
	Workers       int            `json:"workers"`
	Masters       int            `json:"masters"`
	RegionServers int            `json:"region_servers"`
	Faults        map[string]int `json:"faults"` // counts by kind
	Steps         []Step         `json:"steps"`
}

// MaxDuration bounds the fault phase.
func (p Plan) MaxDuration() time.Duration { return time.Duration(p.MaxDurationMS) * time.Millisecond }

// PlanConfig is what a plan is drawn for.
type PlanConfig struct {
	Test          string
	MaxDuration   time.Duration
	Faults        map[string]int // how many faults of each kind
	Workers       int
	Masters       int
	RegionServers int
}

// masterID and rsID are the harness's names of the i-th (from 0) master
// and region server.
func masterID(i int) string { return fmt.Sprintf("n%d", i+1) }
func rsID(i int) string     { return fmt.Sprintf("rs%d", i+1) }

// Pacing of a plan: a gap of [gapMin, gapMax) between two faults of a lane
// (the clients see a healthy cluster for a moment), and the time each kind
// is expected to take beside its hold (taking effect, healing, the node
// rejoining), which places the next step of the lane. A region server cut
// lasts until the masters expired its lease: the hard limit and some.
const (
	gapMin = 200 * time.Millisecond
	gapMax = time.Second
)

var expectedBeyondHold = map[string]time.Duration{
	FaultLeaderKill: 3 * time.Second,
	FaultPause:      2 * time.Second,
	FaultIsolate:    2 * time.Second,
	FaultSplit:      3 * time.Second,
	FaultRSCut:      lease.DefaultConfig().HardLimit + 10*time.Second,
	FaultRSKill:     3 * time.Second,
	FaultRSPause:    3 * time.Second,
}

// holdRange is the range each kind's hold is drawn from: pauses sometimes
// shorter than a region server's self-fence period (6 s), so it comes back
// still holding its regions, sometimes longer.
var holdRange = map[string][2]time.Duration{
	FaultPause:   {300 * time.Millisecond, 2 * time.Second},
	FaultIsolate: {500 * time.Millisecond, 3 * time.Second},
	FaultSplit:   {500 * time.Millisecond, 3 * time.Second},
	FaultRSKill:  {100 * time.Millisecond, 2 * time.Second},
	FaultRSPause: {time.Second, 9 * time.Second},
}

// NewPlan draws the schedule of cfg from seed; the same seed and cfg give
// the same plan. Each lane's faults are shuffled, then given a target, a
// hold and an offset, in that order, from one generator.
func NewPlan(seed uint64, cfg PlanConfig) Plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	p := Plan{Test: cfg.Test, Seed: seed, MaxDurationMS: cfg.MaxDuration.Milliseconds(), Workers: cfg.Workers,
		Masters: cfg.Masters, RegionServers: cfg.RegionServers, Faults: map[string]int{}}
	for _, k := range FaultKinds {
		if cfg.Faults[k] > 0 {
			p.Faults[k] = cfg.Faults[k]
		}
	}
	for _, rs := range []bool{false, true} {
		var kinds []string
		for _, k := range FaultKinds {
			if rsFault[k] == rs {
				for range p.Faults[k] {
					kinds = append(kinds, k)
				}
			}
		}
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		var t time.Duration
		for _, k := range kinds {
			s := Step{Fault: k, Target: TargetLeader}
			switch {
			case k == FaultSplit:
				s.Target = masterID(rng.IntN(max(cfg.Masters, 1)))
			case rs:
				s.Target = rsID(rng.IntN(max(cfg.RegionServers, 1)))
			}
			var hold time.Duration
			if r, ok := holdRange[k]; ok {
				hold = between(r[0], r[1])
			}
			at := t + between(gapMin, gapMax)
			s.AtMS, s.HoldMS = at.Milliseconds(), hold.Milliseconds()
			p.Steps = append(p.Steps, s)
			t = at + hold + expectedBeyondHold[k]
		}
	}
	sortSteps(p.Steps)
	return p
}

// sortSteps orders steps by offset (the lanes interleaved), stably: a
// lane's own order never changes.
func sortSteps(s []Step) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].AtMS < s[j].AtMS })
}

// Validate says what is wrong with a plan read from a file.
func (p Plan) Validate() error {
	var errs []error
	if p.MaxDurationMS <= 0 {
		errs = append(errs, fmt.Errorf("max_duration_ms %d: want > 0", p.MaxDurationMS))
	}
	if p.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d: want ≥ 0", p.Workers))
	}
	masters, servers := map[string]bool{}, map[string]bool{}
	for i := range p.Masters {
		masters[masterID(i)] = true
	}
	for i := range p.RegionServers {
		servers[rsID(i)] = true
	}
	known := map[string]bool{}
	for _, k := range FaultKinds {
		known[k] = true
	}
	for i, s := range p.Steps {
		switch {
		case !known[s.Fault]:
			errs = append(errs, fmt.Errorf("step %d: unknown fault %q (want one of %q)", i, s.Fault, FaultKinds))
		case s.AtMS < 0 || s.HoldMS < 0:
			errs = append(errs, fmt.Errorf("step %d: negative at_ms or hold_ms", i))
		case rsFault[s.Fault] && !servers[s.Target]:
			errs = append(errs, fmt.Errorf("step %d: %s needs a region server rs1..rs%d, not %q", i, s.Fault, p.RegionServers, s.Target))
		case s.Fault == FaultSplit && !masters[s.Target]:
			errs = append(errs, fmt.Errorf("step %d: %s needs a master n1..n%d, not %q", i, s.Fault, p.Masters, s.Target))
		case !rsFault[s.Fault] && s.Fault != FaultSplit && s.Target != TargetLeader:
			errs = append(errs, fmt.Errorf("step %d: %s is aimed at %q only, not %q", i, s.Fault, TargetLeader, s.Target))
		}
	}
	return errors.Join(errs...)
}

// Counts returns how many steps of each kind the plan holds.
func (p Plan) Counts() map[string]int {
	out := map[string]int{}
	for _, s := range p.Steps {
		out[s.Fault]++
	}
	return out
}

// Lane returns the indexes of p's steps of one lane (the region server
// faults, or the master faults), in order.
func (p Plan) Lane(rs bool) []int {
	var out []int
	for i, s := range p.Steps {
		if rsFault[s.Fault] == rs {
			out = append(out, i)
		}
	}
	return out
}

// Log renders the plan, one step a line.
func (p Plan) Log() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule of seed %d: %d faults within %v", p.Seed, len(p.Steps), p.MaxDuration())
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "\n  %3d %s", i, s)
	}
	return b.String()
}

// WritePlan writes p as indented JSON to path.
func WritePlan(path string, p Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("chaos: encode schedule: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("chaos: write schedule: %w", err)
	}
	return nil
}

// ReadPlan reads and validates a plan WritePlan wrote (or a record of a
// run: what happened is dropped, AtMS kept).
func ReadPlan(path string) (Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("chaos: read schedule: %w", err)
	}
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Plan{}, fmt.Errorf("chaos: schedule %s: %w", path, err)
	}
	if err := p.Validate(); err != nil {
		return Plan{}, fmt.Errorf("chaos: schedule %s: %w", path, err)
	}
	for i := range p.Steps {
		p.Steps[i].PlannedAtMS, p.Steps[i].On, p.Steps[i].Outcome, p.Steps[i].TookMS = nil, "", "", 0
	}
	sortSteps(p.Steps)
	return p, nil
}

// countEnv names the environment variable of each fault kind's count in
// TestChaosLong (and `make chaos`).
var countEnv = map[string]string{
	FaultLeaderKill: "BATON_CHAOS_LEADER_KILLS",
	FaultPause:      "BATON_CHAOS_PAUSES",
	FaultIsolate:    "BATON_CHAOS_ISOLATIONS",
	FaultSplit:      "BATON_CHAOS_SPLITS",
	FaultRSCut:      "BATON_CHAOS_RS_CUTS",
	FaultRSKill:     "BATON_CHAOS_RS_KILLS",
	FaultRSPause:    "BATON_CHAOS_RS_PAUSES",
}

// ReplayCommands returns the commands that replay a run of p: by its
// seed (which, with the same counts, draws the same plan) and by the
// recorded schedule file (the faults at the times they started, for a
// failure the seed's plan does not bring back). The long run replays
// through `make chaos`, whose counts are given; the short run's counts are
// in its code.
func ReplayCommands(p Plan, recorded string) (bySeed, bySchedule string) {
	if p.Test == "TestChaosLong" {
		var b strings.Builder
		fmt.Fprintf(&b, "make chaos SEED=%d BATON_CHAOS_DURATION=%v", p.Seed, p.MaxDuration())
		for _, k := range FaultKinds {
			fmt.Fprintf(&b, " %s=%d", countEnv[k], p.Faults[k])
		}
		fmt.Fprintf(&b, " BATON_CHAOS_WORKERS=%d", p.Workers)
		return b.String(), "make chaos SCHEDULE=" + shellQuote(recorded)
	}
	test := fmt.Sprintf("go test -run '^%s$' -count=1 -v -timeout 15m ./integration/chaos/", p.Test)
	return fmt.Sprintf("BATON_CHAOS_NEMESIS_SEED=%d %s", p.Seed, test),
		fmt.Sprintf("BATON_CHAOS_SCHEDULE=%s %s", shellQuote(recorded), test)
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
