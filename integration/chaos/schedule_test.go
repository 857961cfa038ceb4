package chaos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func shortPlanConfig() PlanConfig {
	return PlanConfig{Test: "TestChaosShort", MaxDuration: 3 * time.Minute, Workers: 4, Masters: 3, RegionServers: 4,
		Faults: map[string]int{FaultLeaderKill: 2, FaultPause: 2, FaultIsolate: 2, FaultSplit: 2, FaultRSCut: 1, FaultRSKill: 2, FaultRSPause: 1}}
}

// The seed alone names the schedule: the same seed and config draw the
// same plan, another seed another one.
func TestPlanIsAFunctionOfSeedAndConfig(t *testing.T) {
	cfg := shortPlanConfig()
	a, b := NewPlan(42, cfg), NewPlan(42, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 drew two plans:\n%s\n%s", a.Log(), b.Log())
	}
	if c := NewPlan(43, cfg); reflect.DeepEqual(a.Steps, c.Steps) {
		t.Fatalf("seeds 42 and 43 drew the same steps:\n%s", a.Log())
	}
	// A config the caller changes afterwards does not change the plan.
	cfg.Faults[FaultLeaderKill] = 9
	if a.Faults[FaultLeaderKill] != 2 {
		t.Fatalf("the plan shares the caller's counts: %v", a.Faults)
	}
}

func TestPlanHoldsTheCountsAndValidTargets(t *testing.T) {
	cfg := shortPlanConfig()
	for seed := range uint64(50) {
		p := NewPlan(seed, cfg)
		if got := p.Counts(); !reflect.DeepEqual(got, cfg.Faults) {
			t.Fatalf("seed %d: counts %v, want %v", seed, got, cfg.Faults)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, p.Log())
		}
		for _, rs := range []bool{false, true} {
			var prev *Step
			for _, i := range p.Lane(rs) {
				s := p.Steps[i]
				if r, ok := holdRange[s.Fault]; ok && (s.Hold() < r[0] || s.Hold() >= r[1]) {
					t.Fatalf("seed %d: %s held %v, outside %v", seed, s.Fault, s.Hold(), r)
				}
				if prev != nil {
					// The lane's next step leaves the one before the time it
					// is expected to take, and a gap.
					min := prev.At() + prev.Hold() + expectedBeyondHold[prev.Fault] + gapMin
					if s.At() < min-time.Millisecond {
						t.Fatalf("seed %d: %s at %v, before %v (after %s)", seed, s.Fault, s.At(), min, prev)
					}
				}
				prev = &s
			}
		}
		for i := 1; i < len(p.Steps); i++ {
			if p.Steps[i].AtMS < p.Steps[i-1].AtMS {
				t.Fatalf("seed %d: steps out of order:\n%s", seed, p.Log())
			}
		}
	}
}

// Every target a plan draws is reached: over many seeds, each region
// server and each master is hit.
func TestPlanTargetsSpreadOverTheNodes(t *testing.T) {
	hit := map[string]bool{}
	for seed := range uint64(50) {
		for _, s := range NewPlan(seed, shortPlanConfig()).Steps {
			hit[s.Target] = true
		}
	}
	for _, want := range []string{TargetLeader, "n1", "n2", "n3", "rs1", "rs2", "rs3", "rs4"} {
		if !hit[want] {
			t.Errorf("no plan of 50 seeds aims at %s (hit: %v)", want, hit)
		}
	}
}

func TestPlanWithoutFaultsIsEmpty(t *testing.T) {
	p := NewPlan(7, PlanConfig{Test: "TestChaosLong", MaxDuration: time.Minute, Masters: 3, RegionServers: 4})
	if len(p.Steps) != 0 || len(p.Counts()) != 0 {
		t.Fatalf("a baseline config drew %s", p.Log())
	}
}

// A plan written and read back is the same plan; the record of a run
// read back is a plan whose steps start when they started.
func TestPlanJSONRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := NewPlan(14971426104519912050, shortPlanConfig()) // past 2^53
	path := filepath.Join(dir, "schedule.json")
	if err := WritePlan(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("read back:\n%+v\nwant:\n%+v", got, p)
	}

	rec := p
	rec.Steps = append([]Step(nil), p.Steps...)
	planned := rec.Steps[0].AtMS
	rec.Steps[0].AtMS += 1500
	rec.Steps[0].PlannedAtMS, rec.Steps[0].On, rec.Steps[0].Outcome, rec.Steps[0].TookMS = &planned, "n2", "took effect", 2100
	rpath := filepath.Join(dir, "schedule.ran.json")
	if err := WritePlan(rpath, rec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rpath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"planned_at_ms"`, `"on": "n2"`, `"outcome": "took effect"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the record lacks %s:\n%s", want, b)
		}
	}
	back, err := ReadPlan(rpath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range back.Steps {
		if s.PlannedAtMS != nil || s.On != "" || s.Outcome != "" || s.TookMS != 0 {
			t.Fatalf("a replay keeps what a run recorded: %+v", s)
		}
	}
	found := false
	for _, s := range back.Steps {
		if s.AtMS == planned+1500 && s.Fault == p.Steps[0].Fault {
			found = true
		}
	}
	if !found {
		t.Fatalf("the replay does not start step 0 when it started (%d ms):\n%s", planned+1500, back.Log())
	}
}

func TestReadPlanRefusesABadSchedule(t *testing.T) {
	good := NewPlan(1, shortPlanConfig())
	cases := map[string]func(p *Plan){
		"unknown fault":         func(p *Plan) { p.Steps[0].Fault = "meteor" },
		"leader fault on rs":    func(p *Plan) { p.Steps[firstOf(p, FaultLeaderKill)].Target = "rs1" },
		"split of no master":    func(p *Plan) { p.Steps[firstOf(p, FaultSplit)].Target = "n9" },
		"region server missing": func(p *Plan) { p.Steps[firstOf(p, FaultRSKill)].Target = "rs5" },
		"negative hold":         func(p *Plan) { p.Steps[0].HoldMS = -1 },
		"no duration":           func(p *Plan) { p.MaxDurationMS = 0 },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			p := good
			p.Steps = append([]Step(nil), good.Steps...)
			spoil(&p)
			path := filepath.Join(t.TempDir(), "s.json")
			if err := WritePlan(path, p); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadPlan(path); err == nil {
				t.Fatalf("read a plan with %s", name)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "typo.json")
	if err := os.WriteFile(path, []byte(`{"seed": "1", "max_duration_ms": 1000, "stepz": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPlan(path); err == nil || !strings.Contains(err.Error(), "stepz") {
		t.Fatalf("a misspelt field: %v", err)
	}
}

func firstOf(p *Plan, kind string) int {
	for i, s := range p.Steps {
		if s.Fault == kind {
			return i
		}
	}
	panic("no step of kind " + kind) // the test's own plan: a bug in the test
}

func TestReplayCommands(t *testing.T) {
	long := NewPlan(12345, PlanConfig{Test: "TestChaosLong", MaxDuration: 45 * time.Minute, Workers: 4, Masters: 3, RegionServers: 4,
		Faults: map[string]int{FaultLeaderKill: 50, FaultPause: 10, FaultIsolate: 0, FaultSplit: 10, FaultRSCut: 10, FaultRSKill: 20, FaultRSPause: 10}})
	seed, sched := ReplayCommands(long, "/tmp/a dir/schedule-TestChaosLong.ran.json")
	wantSeed := "make chaos SEED=12345 BATON_CHAOS_DURATION=45m0s BATON_CHAOS_LEADER_KILLS=50 BATON_CHAOS_PAUSES=10 " +
		"BATON_CHAOS_ISOLATIONS=0 BATON_CHAOS_SPLITS=10 BATON_CHAOS_RS_CUTS=10 BATON_CHAOS_RS_KILLS=20 BATON_CHAOS_RS_PAUSES=10 BATON_CHAOS_WORKERS=4"
	if seed != wantSeed {
		t.Errorf("long, by seed:\n got %s\nwant %s", seed, wantSeed)
	}
	if want := "make chaos SCHEDULE='/tmp/a dir/schedule-TestChaosLong.ran.json'"; sched != want {
		t.Errorf("long, by schedule:\n got %s\nwant %s", sched, want)
	}

	short := NewPlan(7, shortPlanConfig())
	seed, sched = ReplayCommands(short, "/tmp/x/schedule-TestChaosShort.ran.json")
	if want := "BATON_CHAOS_NEMESIS_SEED=7 go test -run '^TestChaosShort$' -count=1 -v -timeout 15m ./integration/chaos/"; seed != want {
		t.Errorf("short, by seed:\n got %s\nwant %s", seed, want)
	}
	if want := "BATON_CHAOS_SCHEDULE=/tmp/x/schedule-TestChaosShort.ran.json go test -run '^TestChaosShort$' -count=1 -v -timeout 15m ./integration/chaos/"; sched != want {
		t.Errorf("short, by schedule:\n got %s\nwant %s", sched, want)
	}

	// The counts the seed command names draw the same plan again: what
	// TestChaosLong reads from them is the config it was drawn from.
	again := NewPlan(long.Seed, PlanConfig{Test: "TestChaosLong", MaxDuration: long.MaxDuration(), Workers: long.Workers,
		Masters: long.Masters, RegionServers: long.RegionServers, Faults: long.Faults})
	if !reflect.DeepEqual(again, long) {
		t.Errorf("the seed command's config draws another plan")
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/x.json": "/tmp/x.json",
		"a b":         "'a b'",
		"it's":        `'it'\''s'`,
		"":            "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
