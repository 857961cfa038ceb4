package admin

import (
	"testing"
	"time"
)

// Upgraded followers must not re-register every tick while a 0.1.0 leader
// leads: it stores their addresses and never their report (nor the proof
// of their address), so the registration is sent again at once only when
// what it says or the leader changes, else after a wait that doubles with
// each repeat up to reRegisterEvery.
func TestRegisterDueBacksOffWhileTheMarksDoNotAppear(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sent := registration{adminAddr: "a:1", httpAddr: "h:1", leader: "m1", at: t0, wait: reRegisterEvery}
	at := func(d time.Duration) registration { r := sent; r.at, r.wait = t0.Add(d), 0; return r }
	with := func(f func(*registration)) registration { r := at(time.Second); f(&r); return r }
	for _, tc := range []struct {
		name        string
		addrs, mark bool
		last, now   registration
		want        bool
	}{
		{"never registered", false, false, registration{}, at(0), true},
		{"address not stored: every tick", false, false, sent, at(250 * time.Millisecond), true},
		{"address not stored, marks stale", false, true, sent, at(250 * time.Millisecond), true},
		{"all stored", true, true, sent, at(2 * reRegisterEvery), false},
		{"all stored, never sent by this run", true, true, registration{}, at(0), false},
		{"marks missing after a registration taken: wait", true, false, sent, at(250 * time.Millisecond), false},
		{"marks missing, just short of the wait", true, false, sent, at(reRegisterEvery - time.Millisecond), false},
		{"marks missing, the wait over", true, false, sent, at(reRegisterEvery), true},
		{"marks missing, not sent by this run", true, false, registration{}, at(0), true},
		{"marks missing, admin address changed", true, false, sent, with(func(r *registration) { r.adminAddr = "a:2" }), true},
		{"marks missing, HTTP address changed", true, false, sent, with(func(r *registration) { r.httpAddr = "h:2" }), true},
		{"marks missing, another leader", true, false, sent, with(func(r *registration) { r.leader = "m2" }), true},
		{"marks missing, clock went back", true, false, sent, at(-time.Hour), false},
	} {
		if got := registerDue(tc.addrs, tc.mark, tc.last, tc.now); got != tc.want {
			t.Errorf("%s: registerDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}
