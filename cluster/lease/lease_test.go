package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testcheck"
	"github.com/baton-dev/baton/internal/testwait"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings of the error; none: valid
	}{
		{"default", func(*Config) {}, nil},
		{"fast test timings", func(c *Config) {
			c.SoftLimit, c.HardLimit, c.MonitorInterval, c.MaxPassTime = 50*time.Millisecond, 150*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
		}, nil},
		{"zero soft", func(c *Config) { c.SoftLimit = 0 }, []string{"SoftLimit must be > 0"}},
		{"negative pass", func(c *Config) { c.MaxPassTime = -1 }, []string{"MaxPassTime must be > 0"}},
		{"zero interval", func(c *Config) { c.MonitorInterval = 0 }, []string{"MonitorInterval must be > 0"}},
		{"soft equals hard", func(c *Config) { c.SoftLimit = c.HardLimit }, []string{"SoftLimit (15s) must be < HardLimit (15s)"}},
		{"interval beyond hard", func(c *Config) { c.MonitorInterval = time.Minute }, []string{"MonitorInterval (1m0s) must not exceed HardLimit"}},
		{"no clock", func(c *Config) { c.Clock = nil }, []string{"Clock must be set"}},
		{"all problems reported", func(c *Config) { *c = Config{} }, []string{"SoftLimit", "HardLimit", "MonitorInterval", "MaxPassTime", "Clock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			if !testcheck.Refusal(t, cfg.Validate(), tt.want) {
				if _, err := New(cfg); err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if _, err := New(cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Live: "live", Suspect: "suspect", Expired: "expired", Unknown: "unknown", State(42): "unknown"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
	var zero State
	if zero != Unknown {
		t.Error("the zero State must be Unknown")
	}
}

// Limits are strict, as in HDFS: exactly at a limit the holder is still on
// the better side of it.
func TestStateFollowsLimits(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		after time.Duration
		want  State
	}{
		{0, Live},
		{cfg.SoftLimit, Live},
		{cfg.SoftLimit + time.Nanosecond, Suspect},
		{cfg.HardLimit, Suspect},
		{cfg.HardLimit + time.Nanosecond, Expired},
		{time.Hour, Expired},
	}
	for _, tt := range tests {
		t.Run(tt.after.String(), func(t *testing.T) {
			m, c, _ := newManual(t, nil)
			m.Grant("rs1")
			c.Advance(tt.after)
			if got := m.State("rs1"); got != tt.want {
				t.Errorf("State = %v, want %v", got, tt.want)
			}
			if in, ok := m.Get("rs1"); !ok || in.State != tt.want {
				t.Errorf("Get = %+v, %v; want state %v", in, ok, tt.want)
			}
			if got := m.State("nobody"); got != Unknown {
				t.Errorf("State(nobody) = %v", got)
			}
		})
	}
}

// TestCounts: the counts by state agree with List, also once a lease
// expired and its holder was granted a new one (the old one, detached, is
// the monitor's to report and counted nowhere).
func TestCounts(t *testing.T) {
	cfg := DefaultConfig()
	m, c, _ := newManual(t, nil)
	m.Grant("old")
	c.Advance(cfg.HardLimit + time.Nanosecond)
	m.Grant("suspect")
	c.Advance(cfg.SoftLimit + time.Nanosecond)
	m.Grant("live1")
	m.Grant("live2")
	m.Grant("live3")
	c.Advance(time.Nanosecond)
	check := func(want map[State]int) {
		t.Helper()
		got := m.Counts()
		fromList := map[State]int{Live: 0, Suspect: 0, Expired: 0}
		for _, in := range m.List() {
			fromList[in.State]++
		}
		for _, st := range []State{Live, Suspect, Expired} {
			if got[st] != want[st] || fromList[st] != want[st] {
				t.Errorf("%v: Counts %d, List %d, want %d", st, got[st], fromList[st], want[st])
			}
		}
	}
	check(map[State]int{Live: 3, Suspect: 1, Expired: 1})
	// "old" expired; granting it again detaches the expired lease.
	m.Grant("old")
	check(map[State]int{Live: 4, Suspect: 1, Expired: 0})
}

func TestRenewResorts(t *testing.T) {
	tests := []struct {
		name  string
		renew []string // renewed in this order, one second apart, after granting a, b, c
		want  []string // List order
	}{
		{"no renewals", nil, []string{"a", "b", "c"}},
		{"oldest renewed", []string{"a"}, []string{"b", "c", "a"}},
		{"newest renewed", []string{"c"}, []string{"a", "b", "c"}},
		{"middle renewed", []string{"b"}, []string{"a", "c", "b"}},
		{"all reversed", []string{"c", "b", "a"}, []string{"c", "b", "a"}},
		{"renewed twice", []string{"a", "b", "a"}, []string{"c", "b", "a"}},
		{"re-grant renews", []string{"grant:a"}, []string{"b", "c", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, c, _ := newManual(t, nil)
			for _, h := range []string{"a", "b", "c"} {
				m.Grant(h)
				c.Advance(time.Second)
			}
			for _, h := range tt.renew {
				if g, ok := strings.CutPrefix(h, "grant:"); ok {
					m.Grant(g)
				} else if err := m.Renew(h); err != nil {
					t.Fatal(err)
				}
				c.Advance(time.Second)
			}
			if got := holders(m.List()); !slices.Equal(got, tt.want) {
				t.Errorf("List = %v, want %v", got, tt.want)
			}
			checkInvariants(t, m)
		})
	}
}

// Leases granted (or renewed) at the same instant keep the order in which
// that happened.
func TestTiesKeepRenewalOrder(t *testing.T) {
	m, _, _ := newManual(t, nil)
	for _, h := range []string{"x", "a", "m"} {
		m.Grant(h)
	}
	if err := m.Renew("x"); err != nil {
		t.Fatal(err)
	}
	if got, want := holders(m.List()), []string{"a", "m", "x"}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
}

func TestMonitorExpiresOldestFirst(t *testing.T) {
	m, c, rec := newManual(t, nil)
	hard := DefaultConfig().HardLimit
	// Granted at t0, t0+1s, ..., t0+4s; then "a" and "c" renew at t0+5s:
	// order b, d, e, a, c.
	for _, h := range []string{"a", "b", "c", "d", "e"} {
		m.Grant(h, "region-"+h)
		c.Advance(time.Second)
	}
	for _, h := range []string{"a", "c"} {
		if err := m.Renew(h); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		advanceTo time.Duration // since t0
		want      []string
	}{
		{hard, nil},                             // nobody strictly past the hard limit
		{hard + time.Second, nil},               // b renewed at 1s: exactly at the limit
		{hard + time.Second + 1, []string{"b"}}, // b just past it
		{hard + 4*time.Second + 1, []string{"d", "e"}},
		{hard + 5*time.Second, nil},
		{hard + 5*time.Second + 1, []string{"a", "c"}}, // tie: renewal order
		{hard + time.Hour, nil},
	}
	var all []string
	for _, s := range steps {
		c.Advance(t0.Add(s.advanceTo).Sub(c.Now()))
		got := m.CheckNow()
		if !slices.Equal(holders(got), s.want) {
			t.Fatalf("at t0+%v CheckNow = %v, want %v", s.advanceTo, holders(got), s.want)
		}
		for _, in := range got {
			if in.State != Expired || !slices.Equal(in.Entities, []string{"region-" + in.Holder}) {
				t.Errorf("reported %+v", in)
			}
			if _, ok := m.HolderOf("region-" + in.Holder); ok {
				t.Errorf("region-%s still held after expiry", in.Holder)
			}
			if st := m.State(in.Holder); st != Unknown {
				t.Errorf("State(%s) after expiry = %v", in.Holder, st)
			}
		}
		all = append(all, s.want...)
		checkInvariants(t, m)
	}
	if got := rec.holders(); !slices.Equal(got, all) {
		t.Errorf("OnExpire saw %v, want %v", got, all)
	}
}

func TestRenewAfterExpiryFails(t *testing.T) {
	m, c, _ := newManual(t, nil)
	m.Grant("rs1")
	c.Advance(DefaultConfig().HardLimit + time.Millisecond)

	// Past the hard limit but not yet swept: expired all the same.
	if err := m.Renew("rs1"); !errors.Is(err, ErrExpired) {
		t.Fatalf("Renew before the sweep = %v, want ErrExpired", err)
	}
	if err := m.AddEntity("rs1", "r1"); !errors.Is(err, ErrExpired) {
		t.Fatalf("AddEntity before the sweep = %v, want ErrExpired", err)
	}
	if got := holders(m.CheckNow()); !slices.Equal(got, []string{"rs1"}) {
		t.Fatalf("CheckNow = %v", got)
	}
	// Swept: now unknown.
	if err := m.Renew("rs1"); !errors.Is(err, ErrUnknownHolder) {
		t.Fatalf("Renew after the sweep = %v, want ErrUnknownHolder", err)
	}
	if err := m.Renew("never"); !errors.Is(err, ErrUnknownHolder) {
		t.Fatalf("Renew(never) = %v", err)
	}
	if err := m.AddEntity("never", "r1"); !errors.Is(err, ErrUnknownHolder) {
		t.Fatalf("AddEntity(never) = %v", err)
	}
}

// A suspect holder may still renew and becomes live again.
func TestSuspectRenewsBackToLive(t *testing.T) {
	m, c, _ := newManual(t, nil)
	m.Grant("rs1")
	c.Advance(DefaultConfig().SoftLimit + time.Second)
	if got := m.State("rs1"); got != Suspect {
		t.Fatalf("State = %v", got)
	}
	if err := m.Renew("rs1"); err != nil {
		t.Fatal(err)
	}
	if got := m.State("rs1"); got != Live {
		t.Fatalf("State after renew = %v", got)
	}
}

func TestGrantExisting(t *testing.T) {
	hard := DefaultConfig().HardLimit
	tests := []struct {
		name         string
		wait         time.Duration
		wantGranted  time.Duration // since t0
		wantReported []Info        // by the next CheckNow, at the time of the re-grant
	}{
		{"live lease is renewed", time.Second, 0, nil},
		{"suspect lease is renewed", hard - time.Second, 0, nil},
		{"expired lease is replaced and still reported", hard + time.Second, hard + time.Second,
			// r2 went to the new lease (last claim wins), so the old one's
			// report no longer claims it.
			[]Info{{Holder: "rs1", LastRenewal: t0, State: Expired, Entities: []string{"r1"}, Granted: t0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, c, rec := newManual(t, nil)
			m.Grant("rs1", "r1", "r2")
			c.Advance(tt.wait)
			in := m.Grant("rs1", "r2", "r3")
			want := Info{Holder: "rs1", LastRenewal: c.Now(), State: Live, Entities: []string{"r2", "r3"}, Granted: t0.Add(tt.wantGranted)}
			if !infoEqual(in, want) {
				t.Fatalf("Grant = %+v, want %+v", in, want)
			}
			// The entities were replaced.
			for e, want := range map[string]bool{"r1": tt.wantReported != nil, "r2": true, "r3": true} {
				if _, ok := m.HolderOf(e); ok != want {
					t.Errorf("HolderOf(%s) held = %v, want %v", e, ok, want)
				}
			}
			checkInvariants(t, m)
			got := m.CheckNow()
			if len(got) != len(tt.wantReported) {
				t.Fatalf("CheckNow = %+v, want %+v", got, tt.wantReported)
			}
			for i := range got {
				if !infoEqual(got[i], tt.wantReported[i]) {
					t.Errorf("reported %+v, want %+v", got[i], tt.wantReported[i])
				}
			}
			if len(rec.holders()) != len(tt.wantReported) {
				t.Errorf("OnExpire saw %v", rec.holders())
			}
			// The new lease is untouched by the old one's expiry.
			if got := m.State("rs1"); got != Live {
				t.Errorf("State after the sweep = %v", got)
			}
			for _, e := range []string{"r2", "r3"} {
				if h, ok := m.HolderOf(e); !ok || h != "rs1" {
					t.Errorf("HolderOf(%s) = %q, %v", e, h, ok)
				}
			}
			if _, ok := m.HolderOf("r1"); ok {
				t.Error("r1 still held")
			}
			checkInvariants(t, m)
		})
	}
}

func TestRelease(t *testing.T) {
	hard := DefaultConfig().HardLimit
	tests := []struct {
		name       string
		wait       time.Duration
		want       bool
		wantExpiry bool
	}{
		{"live", time.Second, true, false},
		{"suspect", hard, true, false},
		{"expired: too late, still reported", hard + 1, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, c, _ := newManual(t, nil)
			m.Grant("rs1", "r1")
			c.Advance(tt.wait)
			if got := m.Release("rs1"); got != tt.want {
				t.Fatalf("Release = %v, want %v", got, tt.want)
			}
			if got := m.State("rs1"); got != Unknown {
				t.Errorf("State after Release = %v", got)
			}
			if len(m.List()) != 0 {
				t.Errorf("List after Release = %+v", m.List())
			}
			if m.Release("rs1") {
				t.Error("second Release returned true")
			}
			checkInvariants(t, m)
			got := m.CheckNow()
			if (len(got) == 1) != tt.wantExpiry || len(got) > 1 {
				t.Fatalf("CheckNow = %+v, want expiry %v", got, tt.wantExpiry)
			}
			if tt.wantExpiry && !slices.Equal(got[0].Entities, []string{"r1"}) {
				t.Errorf("reported entities %v", got[0].Entities)
			}
			if _, ok := m.HolderOf("r1"); ok {
				t.Error("r1 still held")
			}
			checkInvariants(t, m)
		})
	}
	m, _, _ := newManual(t, nil)
	if m.Release("never") {
		t.Error("Release of an unknown holder returned true")
	}
}

func TestGraceAll(t *testing.T) {
	cfg := DefaultConfig()
	m, c, _ := newManual(t, nil)
	// As a new leader finds them: grants replayed long ago, renewal times
	// meaningless. a is far past the hard limit, b suspect, c live.
	m.Grant("a", "ra")
	c.Advance(cfg.HardLimit)
	m.Grant("b")
	c.Advance(cfg.SoftLimit + time.Second)
	m.Grant("c")
	// d expired, then was re-granted: its old lease is detached and stays expired.
	m.Grant("d", "rd")
	c.Advance(cfg.HardLimit + time.Second)
	m.Grant("d")
	checkInvariants(t, m)

	m.GraceAll()
	now := c.Now()
	for _, in := range m.List() {
		if in.State != Live || !in.LastRenewal.Equal(now) {
			t.Errorf("after GraceAll %+v", in)
		}
	}
	if got, want := holders(m.List()), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("order after GraceAll = %v, want %v", got, want)
	}
	checkInvariants(t, m)

	// Only the detached lease expires now.
	if got := holders(m.CheckNow()); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("CheckNow right after GraceAll = %v", got)
	}
	c.Advance(cfg.HardLimit)
	if got := m.CheckNow(); len(got) != 0 {
		t.Fatalf("expired before a full hard limit: %v", holders(got))
	}
	c.Advance(1)
	if got, want := holders(m.CheckNow()), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("CheckNow after a hard limit = %v, want %v", got, want)
	}
	checkInvariants(t, m)
}

func TestEntityIndex(t *testing.T) {
	type op struct {
		do   string // grant, add, remove, release, renew, expire
		h, e string
		es   []string
	}
	tests := []struct {
		name    string
		ops     []op
		want    map[string]string // entity -> holder ("" for none)
		wantErr error             // from the last op
	}{
		{"grant indexes", []op{{do: "grant", h: "a", es: []string{"r1", "r2"}}},
			map[string]string{"r1": "a", "r2": "a", "r3": ""}, nil},
		{"add", []op{{do: "grant", h: "a"}, {do: "add", h: "a", e: "r1"}},
			map[string]string{"r1": "a"}, nil},
		{"add to unknown", []op{{do: "add", h: "a", e: "r1"}},
			map[string]string{"r1": ""}, ErrUnknownHolder},
		{"add moves from another holder", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "grant", h: "b"}, {do: "add", h: "b", e: "r1"}},
			map[string]string{"r1": "b"}, nil},
		{"grant moves from another holder", []op{{do: "grant", h: "a", es: []string{"r1", "r2"}}, {do: "grant", h: "b", es: []string{"r2"}}},
			map[string]string{"r1": "a", "r2": "b"}, nil},
		{"remove by owner", []op{{do: "grant", h: "a", es: []string{"r1", "r2"}}, {do: "remove", h: "a", e: "r1"}},
			map[string]string{"r1": "", "r2": "a"}, nil},
		{"remove by non-owner is ignored", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "grant", h: "b"}, {do: "remove", h: "b", e: "r1"}},
			map[string]string{"r1": "a"}, nil},
		{"release frees", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "release", h: "a"}},
			map[string]string{"r1": ""}, nil},
		{"expiry frees", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "expire"}},
			map[string]string{"r1": ""}, nil},
		{"add does not renew", []op{{do: "grant", h: "a"}, {do: "wait-soft"}, {do: "add", h: "a", e: "r1"}, {do: "state", h: "a"}},
			map[string]string{"r1": "a"}, nil},
		{"held while expired until reported", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "wait-hard"}},
			map[string]string{"r1": "a"}, nil},
		{"claim from a detached lease", []op{{do: "grant", h: "a", es: []string{"r1"}}, {do: "wait-hard"}, {do: "release", h: "a"}, {do: "grant", h: "b", es: []string{"r1"}}, {do: "sweep"}},
			map[string]string{"r1": "b"}, nil},
	}
	cfg := DefaultConfig()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, c, _ := newManual(t, nil)
			var err error
			for _, o := range tt.ops {
				err = nil
				switch o.do {
				case "grant":
					in := m.Grant(o.h, o.es...)
					if want := slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(o.es))))); !slices.Equal(in.Entities, want) && len(want) > 0 {
						t.Errorf("Grant entities %v, want %v", in.Entities, want)
					}
				case "add":
					err = m.AddEntity(o.h, o.e)
				case "remove":
					m.RemoveEntity(o.h, o.e)
				case "release":
					m.Release(o.h)
				case "wait-soft":
					c.Advance(cfg.SoftLimit + 1)
				case "wait-hard":
					c.Advance(cfg.HardLimit + 1)
				case "expire":
					c.Advance(cfg.HardLimit + 1)
					m.CheckNow()
				case "sweep":
					m.CheckNow()
				case "state":
					if got := m.State(o.h); got != Suspect {
						t.Errorf("State(%s) = %v, want suspect", o.h, got)
					}
				}
				checkInvariants(t, m)
			}
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Errorf("last error = %v, want %v", err, tt.wantErr)
			}
			for e, want := range tt.want {
				got, ok := m.HolderOf(e)
				if got != want || ok != (want != "") {
					t.Errorf("HolderOf(%s) = %q, %v; want %q", e, got, ok, want)
				}
			}
			// Every lease lists exactly the entities the index gives it.
			for _, in := range m.List() {
				for _, e := range in.Entities {
					if h, _ := m.HolderOf(e); h != in.Holder {
						t.Errorf("%s lists %s, held by %q", in.Holder, e, h)
					}
				}
			}
		})
	}
}

func TestInfoEntitiesSorted(t *testing.T) {
	m, _, _ := newManual(t, nil)
	m.Grant("a", "z", "b", "m", "b")
	in, _ := m.Get("a")
	if !slices.Equal(in.Entities, []string{"b", "m", "z"}) {
		t.Errorf("Entities = %v", in.Entities)
	}
}

// The pass bound is measured by the Clock. A clock that moves by step on
// every reading makes a pass "take" one step per expired lease, so the
// number removed per pass is exact: MaxPassTime/step, at least one.
func TestPassIsBounded(t *testing.T) {
	const n = 20
	const step = 10 * time.Millisecond
	tests := []struct {
		maxPass time.Duration
		perPass int
	}{
		{time.Nanosecond, 1}, // always progress
		{step, 1},
		{3 * step, 3},
		{3*step + 1, 4},
		{time.Hour, n},
	}
	for _, tt := range tests {
		t.Run(tt.maxPass.String(), func(t *testing.T) {
			c := &setClock{now: t0}
			rec := &recorder{}
			cfg := testConfig(c, rec)
			cfg.MaxPassTime = tt.maxPass
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range n {
				c.set(t0.Add(time.Duration(i)*time.Second), 0)
				h := fmt.Sprintf("rs%02d", i)
				m.Grant(h)
				want = append(want, h)
			}
			c.set(t0.Add(n*time.Second+cfg.HardLimit), 0)
			m.Grant("fresh") // never expires in this test
			c.set(t0.Add(n*time.Second+cfg.HardLimit), step)

			var got []string
			for pass := 0; ; pass++ {
				out := m.CheckNow()
				if len(out) == 0 {
					break
				}
				if wantLen := min(tt.perPass, n-len(got)); len(out) != wantLen {
					t.Fatalf("pass %d removed %d, want %d", pass, len(out), wantLen)
				}
				got = append(got, holders(out)...)
				checkInvariants(t, m)
			}
			if !slices.Equal(got, want) || !slices.Equal(rec.holders(), want) {
				t.Fatalf("expired %v (OnExpire %v), want %v", got, rec.holders(), want)
			}
			if m.State("fresh") == Unknown {
				t.Error("a live lease was expired")
			}
		})
	}
}

// Insertion keeps the list sorted even if the clock steps backwards.
func TestClockStepsBack(t *testing.T) {
	c := &setClock{now: t0}
	m, err := New(testConfig(c, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{5, 1, 3, 0, 4, 2} {
		c.set(t0.Add(time.Duration(at)*time.Second), 0)
		m.Grant(fmt.Sprint("h", at))
	}
	if got, want := holders(m.List()), []string{"h0", "h1", "h2", "h3", "h4", "h5"}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	c.set(t0, 0)
	if err := m.Renew("h5"); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, m)
}

func TestConcurrentUse(t *testing.T) {
	m, c, rec := newManual(t, func(cfg *Config) {
		cfg.SoftLimit, cfg.HardLimit = 2*time.Second, 5*time.Second
		cfg.MonitorInterval = time.Second
	})
	m.Start()
	defer m.Stop()
	const workers, holdersPer, rounds = 8, 50, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				h := fmt.Sprintf("w%d-h%d", w, r%holdersPer)
				switch r % 7 {
				case 0:
					m.Grant(h, fmt.Sprintf("e%d", r%13))
				case 1:
					_ = m.AddEntity(h, fmt.Sprintf("e%d", r%17))
				case 2:
					m.RemoveEntity(h, fmt.Sprintf("e%d", r%13))
				case 3:
					m.State(h)
					m.HolderOf(fmt.Sprintf("e%d", r%13))
					m.Get(h)
				case 4:
					if r%21 == 4 {
						m.Release(h)
					}
				default:
					if err := m.Renew(h); err != nil && !errors.Is(err, ErrUnknownHolder) && !errors.Is(err, ErrExpired) {
						t.Error(err)
					}
				}
			}
		}()
	}
	// The clock moves (and the monitor runs in Advance) while they work.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			c.Advance(500 * time.Millisecond)
			m.List()
			if r := len(m.CheckNow()); r < 0 {
				t.Error("impossible")
			}
		}
		m.GraceAll()
	}()
	wg.Wait()
	checkInvariants(t, m)
	// Whatever expired was reported once.
	type key struct {
		holder  string
		granted time.Time
	}
	seen := make(map[key]bool)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, in := range rec.got {
		key := key{in.Holder, in.Granted}
		if seen[key] {
			t.Fatalf("lease %s granted at %v reported twice", in.Holder, in.Granted)
		}
		seen[key] = true
	}
}

func TestMonitorManualClock(t *testing.T) {
	cfg := DefaultConfig()
	m, c, rec := newManual(t, nil)
	m.Grant("a")
	m.Start()
	m.Start() // no second timer
	if got := c.Pending(); got != 1 {
		t.Fatalf("Pending after Start = %d, want 1", got)
	}
	c.Advance(cfg.HardLimit + 1) // one pass, which expires a
	if got := rec.holders(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("OnExpire = %v", got)
	}
	if got := c.Pending(); got != 1 {
		t.Fatalf("Pending after a pass = %d, want 1 (re-armed)", got)
	}
	m.Grant("b")
	m.Stop()
	m.Stop()
	if got := c.Pending(); got != 0 {
		t.Fatalf("Pending after Stop = %d, want 0", got)
	}
	c.Advance(time.Hour)
	if got := rec.holders(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("OnExpire after Stop = %v", got)
	}
	// Restart: b (long expired) goes on the first pass.
	m.Start()
	c.Advance(cfg.MonitorInterval)
	if got := rec.holders(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("OnExpire after restart = %v", got)
	}
	m.Stop()
	if got := c.Pending(); got != 0 {
		t.Fatalf("Pending after the last Stop = %d", got)
	}
}

// Stop waits for a pass in progress: no OnExpire call after it returns.
// In a synctest bubble, Wait returns once Stop is durably blocked, so "Stop
// has not returned" is checked after Stop has had every chance to return,
// not at whatever moment the scheduler happened to reach.
func TestStopWaitsForPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		m, c, _ := newManual(t, func(cfg *Config) {
			cfg.OnExpire = func(Info) {
				close(entered)
				<-release
			}
		})
		m.Grant("a")
		m.Start()
		advanced := make(chan struct{})
		go func() {
			c.Advance(time.Hour) // runs the pass, which blocks in OnExpire
			close(advanced)
		}()
		<-entered
		stopped := make(chan struct{})
		go func() {
			m.Stop()
			close(stopped)
		}()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while OnExpire was running")
		default:
		}
		close(release)
		<-stopped
		<-advanced
		if got := c.Pending(); got != 0 {
			t.Fatalf("the stopped pass re-armed the monitor: Pending = %d", got)
		}
	})
}

// OnExpire may call back into the manager (it is called outside the lock).
func TestOnExpireMayUseManager(t *testing.T) {
	var m *Manager
	var regranted []Info
	m, c, _ := newManual(t, func(cfg *Config) {
		cfg.OnExpire = func(in Info) {
			regranted = append(regranted, m.Grant(in.Holder+"-new", in.Entities...))
			m.List()
		}
	})
	m.Grant("a", "r1")
	c.Advance(time.Hour)
	m.CheckNow()
	if len(regranted) != 1 {
		t.Fatalf("OnExpire ran %d times", len(regranted))
	}
	if h, _ := m.HolderOf("r1"); h != "a-new" {
		t.Errorf("HolderOf(r1) = %q", h)
	}
}

// With the real clock the monitor runs by itself, on time. In a synctest
// bubble that clock is fake, so the moment of the report is exact: passes
// run every MonitorInterval from Start (a pass takes no time here), a lease
// is expired only once strictly more than HardLimit has passed, so a lease
// granted at Start is reported by the pass at HardLimit + MonitorInterval,
// the bound Config documents, and not a moment earlier or later. After Stop
// nothing is reported however long the clock runs, and Test fails if Stop
// left a goroutine behind.
func TestMonitorRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type report struct {
			in Info
			at time.Time
		}
		var mu sync.Mutex
		var reports []report
		reported := func() []report {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(reports)
		}
		cfg := DefaultConfig()
		if _, ok := cfg.Clock.(clock.Real); !ok {
			t.Fatalf("default clock %T", cfg.Clock)
		}
		cfg.OnExpire = func(in Info) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, report{in, time.Now()})
		}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		m.Grant("a")
		m.Start()

		// sleepTo returns once every pass due by then has finished.
		sleepTo := func(d time.Duration) { testwait.FakeTimeTo(start, d) }
		sleepTo(cfg.SoftLimit)
		if st := m.State("a"); st != Live {
			t.Fatalf("at the soft limit: %v", st)
		}
		sleepTo(cfg.SoftLimit + time.Nanosecond)
		if st := m.State("a"); st != Suspect {
			t.Fatalf("just past the soft limit: %v", st)
		}
		sleepTo(cfg.HardLimit) // a pass runs now too, and keeps it
		if st, r := m.State("a"), reported(); st != Suspect || len(r) != 0 {
			t.Fatalf("at the hard limit: %v, reports %v", st, r)
		}
		sleepTo(cfg.HardLimit + time.Nanosecond)
		if st := m.State("a"); st != Expired {
			t.Fatalf("just past the hard limit: %v", st)
		}
		due := cfg.HardLimit + cfg.MonitorInterval
		sleepTo(due - time.Nanosecond)
		if r := reported(); len(r) != 0 {
			t.Fatalf("reported before the next pass: %v", r)
		}
		sleepTo(due)
		r := reported()
		if len(r) != 1 || r[0].in.Holder != "a" || r[0].in.State != Expired || !r[0].at.Equal(start.Add(due)) {
			t.Fatalf("reports %+v, want a alone at +%v", r, due)
		}
		if _, ok := m.Get("a"); ok {
			t.Fatal("the reported lease is still held")
		}

		m.Stop()
		m.Grant("b")
		testwait.FakeTimeTo(time.Now(), time.Hour)
		if r := reported(); len(r) != 1 {
			t.Fatalf("reports after Stop: %+v", r)
		}
		if st := m.State("b"); st != Expired {
			t.Fatalf("b after an hour: %v, want expired and left for a monitor", st)
		}
	})
}

func infoEqual(a, b Info) bool {
	return a.Holder == b.Holder && a.LastRenewal.Equal(b.LastRenewal) && a.State == b.State &&
		slices.Equal(a.Entities, b.Entities) && a.Granted.Equal(b.Granted)
}
