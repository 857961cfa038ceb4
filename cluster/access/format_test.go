package access

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// mapState is a replicated state the test writes by hand.
type mapState map[string][]byte

func (m mapState) Get(k string) ([]byte, bool) { v, ok := m[k]; return v, ok }

func (m mapState) apply(muts []raftfsm.Mutation) {
	for _, mu := range muts {
		if mu.Op == raftfsm.OpPut {
			m[mu.Key] = mu.Value
		} else {
			delete(m, mu.Key)
		}
	}
}

// putKeys are the keys muts put.
func putKeys(muts []raftfsm.Mutation) []string {
	var out []string
	for _, m := range muts {
		if m.Op == raftfsm.OpPut {
			out = append(out, m.Key)
		}
	}
	return out
}

func atFormat(f version.Format) version.Gate { return func() version.Format { return f } }

// wantRefusal checks err is the FAILED_PRECONDITION of a format 2 write
// at cluster version 1, naming both versions, what goes wrong and what
// to do.
func wantRefusal(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%s: %v, want FAILED_PRECONDITION", what, err)
	}
	for _, s := range append([]string{"needs the cluster version at format 2 (0.2.0), and it is format 1 (0.1.0)", "finish the upgrade"}, says...) {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

// TestACLWritesGatedByClusterVersion: below cluster version 2 (a nil gate
// too) a revocation and a token's ttl are refused FAILED_PRECONDITION
// with nothing to write, token uses are not written (still noted), and a
// token without a ttl, a grant and a token's deletion are written as
// 0.1.0 would; at version 2 each is written as before.
func TestACLWritesGatedByClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate version.Gate
		at2  bool
	}{{"nil gate", nil, false}, {"format 1", atFormat(version.Format1), false}, {"format 2", atFormat(version.Format2), true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := mapState{}
			clk := clock.NewManual(time.Unix(1e6, 0))
			a := NewACL(st, clk, map[string]security.Permission{"ops": security.PermAdmin}, tc.gate)

			grant, _ := a.GrantWrites("reader", security.PermRead, "client/ops")
			st.apply(grant)
			rev, err := a.RevokeWrites("reader", "client/ops")
			if tc.at2 {
				if err != nil || len(putKeys(rev)) != 1 || putKeys(rev)[0] != RevokedPrefix+"reader" {
					t.Fatalf("revoke at 2: %v, %v", rev, err)
				}
			} else {
				if rev != nil {
					t.Errorf("a refused revocation writes %v", rev)
				}
				wantRefusal(t, "revoke", err, `client "reader"`, "--acl-initial-grants", "then revoke")
			}

			muts, acc, _, e, err := a.NewToken("ci", security.PermOperate, "client/ops", time.Hour)
			if tc.at2 {
				if err != nil || e.ExpiresMs != clk.Now().Add(time.Hour).UnixMilli() {
					t.Fatalf("token with a ttl at 2: expires %d, %v", e.ExpiresMs, err)
				}
			} else {
				if muts != nil || acc != "" {
					t.Errorf("a refused token writes %v (%s)", muts, acc)
				}
				wantRefusal(t, "token with a ttl", err, "accept the token after it expires", "without a ttl")
			}
			muts, acc, secret, e, err := a.NewToken("ci", security.PermOperate, "client/ops", 0)
			if err != nil || e.ExpiresMs != 0 {
				t.Fatalf("token without a ttl: %+v, %v", e, err)
			}
			st.apply(muts)
			var stored map[string]any
			if err := json.Unmarshal(st[TokenPrefix+acc], &stored); err != nil {
				t.Fatal(err)
			}
			if _, ok := stored["expires_ms"]; ok {
				t.Errorf("a token without a ttl stores expires_ms: %s", st[TokenPrefix+acc])
			}

			if _, err := a.TokenPrincipal(secret); err != nil {
				t.Fatal(err)
			}
			uses := a.TokenUseWrites()
			if got := len(uses) == 1 && uses[0].Key == TokenUsePrefix+acc; got != tc.at2 {
				t.Errorf("token use written: %v, want %v", uses, tc.at2)
			}
			if a.TokenLastUse(acc) != clk.Now().UnixMilli() {
				t.Errorf("the use is not noted: %d", a.TokenLastUse(acc))
			}
		})
	}
}

// TestBootstrapTokenTTLWaitsForVersion2: a bootstrap token with a TTL is
// not made below cluster version 2 (ErrBootstrapWaits, nothing written);
// once the version is raised it is made, with its expiry. One without a
// TTL is made at version 1 (0.1.0 made it so); one already told stays
// told, whatever the version.
func TestBootstrapTokenTTLWaitsForVersion2(t *testing.T) {
	f := version.Format1
	st := mapState{}
	clk := clock.NewManual(time.Unix(1e6, 0))
	a := NewACL(st, clk, nil, func() version.Format { return f })
	now := clk.Now().UnixMilli()
	boot, muts, err := a.BootstrapWrites("m1", now, time.Hour)
	if !errors.Is(err, ErrBootstrapWaits) || boot != nil || muts != nil {
		t.Fatalf("at format 1 with a ttl: %v, %v, %v; want ErrBootstrapWaits and nothing", boot, muts, err)
	}
	f = version.Format2
	boot, muts, err = a.BootstrapWrites("m1", now, time.Hour)
	if err != nil || boot == nil {
		t.Fatalf("at format 2: %v, %v", boot, err)
	}
	st.apply(muts)
	var e Entry
	if err := json.Unmarshal(st[TokenPrefix+boot.Accessor], &e); err != nil || e.ExpiresMs != clk.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("bootstrap token %+v, %v: want it to expire in an hour", e, err)
	}
	st.apply(BootToldWrites("m1", boot.Accessor, now))
	f = version.Format1 // never lowered in a cluster; a told token stands anyway
	if boot, muts, err := a.BootstrapWrites("m1", now, time.Hour); boot != nil || muts != nil || err != nil {
		t.Fatalf("told: %v, %v, %v", boot, muts, err)
	}

	b := NewACL(mapState{}, clk, nil, nil)
	if boot, _, err := b.BootstrapWrites("m1", now, 0); err != nil || boot == nil {
		t.Fatalf("without a ttl at format 1: %v, %v", boot, err)
	}
}

// TestGivenBootstrapToken: a given bootstrap token is stored as it is
// (its accessor, the hash of its secret, the TTL's expiry, the record of
// a made one), by whichever master leads first; a master finding it
// stored by another that stopped before recording it as told keeps it
// (and its expiry) instead of replacing it; a weak or malformed one is
// refused, its text quoted by no error.
func TestGivenBootstrapToken(t *testing.T) {
	const given = "bt_0123456789abcdef_Zq3xV9mK2pL7wR4tY8uN1bC6dF0gH5jS-_aEiOoUyTq"
	st := mapState{}
	clk := clock.NewManual(time.Unix(1e6, 0))
	fmt2 := func() version.Format { return version.Format2 }
	a := NewACL(st, clk, nil, fmt2)
	if err := a.UseBootstrapToken(given); err != nil {
		t.Fatal(err)
	}
	made := clk.Now()
	boot, muts, err := a.BootstrapWrites("m1", made.UnixMilli(), time.Hour)
	if err != nil || boot == nil || !boot.Given || boot.Accessor != "0123456789abcdef" || boot.Secret != given {
		t.Fatalf("given: %+v, %v", boot, err)
	}
	st.apply(muts)
	var e Entry
	if err := json.Unmarshal(st[TokenPrefix+boot.Accessor], &e); err != nil || e.Hash != security.HashTokenSecret(given[len("bt_0123456789abcdef_"):]) ||
		e.Permission != "admin" || e.Name != "bootstrap" || e.ExpiresMs != made.Add(time.Hour).UnixMilli() {
		t.Fatalf("stored %+v, %v: want the given secret's hash, admin, an hour's TTL", e, err)
	}
	if p, err := a.TokenPrincipal(given); err != nil || p.Perm != security.PermAdmin {
		t.Fatalf("the given token: %+v, %v", p, err)
	}

	// m1 stopped before recording it as told; m2, given the same file,
	// leads later: nothing to write, the token is the same and so is its
	// expiry.
	clk.Advance(10 * time.Minute)
	b := NewACL(st, clk, nil, fmt2)
	if err := b.UseBootstrapToken(given); err != nil {
		t.Fatal(err)
	}
	boot2, muts2, err := b.BootstrapWrites("m2", clk.Now().UnixMilli(), time.Hour)
	if err != nil || boot2 == nil || boot2.Accessor != boot.Accessor || len(muts2) != 0 {
		t.Fatalf("a second leader with the same file: %+v, %v, %v", boot2, muts2, err)
	}
	st.apply(BootToldWrites("m2", boot2.Accessor, clk.Now().UnixMilli()))
	if boot, _, _ := b.BootstrapWrites("m2", clk.Now().UnixMilli(), time.Hour); boot != nil {
		t.Fatalf("told, yet pending: %+v", boot)
	}
	if _, _, ignored := b.GivenBootstrapIgnored(); ignored {
		t.Fatal("the cluster's own given token reported as ignored")
	}
	// A master given another file, once the cluster has its token: that
	// file is ignored, and said to be, by accessor (never the secret).
	other := NewACL(st, clk, nil, fmt2)
	const otherTok = "bt_fedcba9876543210_Zq3xV9mK2pL7wR4tY8uN1bC6dF0gH5jS-_aEiOoUyTq"
	if err := other.UseBootstrapToken(otherTok); err != nil {
		t.Fatal(err)
	}
	if given, recorded, ignored := other.GivenBootstrapIgnored(); !ignored || given != "fedcba9876543210" || recorded != boot.Accessor {
		t.Fatalf("another file: %q %q %v, want ignored, naming both accessors", given, recorded, ignored)
	}
	if boot, muts, _ := other.BootstrapWrites("m3", clk.Now().UnixMilli(), time.Hour); boot != nil || len(muts) != 0 {
		t.Fatalf("another file replaced the cluster's token: %+v %v", boot, muts)
	}

	for name, tok := range map[string]string{
		"weak":      "bt_0123456789abcdef_" + strings.Repeat("ab", 21) + "c",
		"malformed": "bt_0123456789abcdef_short",
		"no prefix": "0123456789abcdef_Zq3xV9mK2pL7wR4tY8uN1bC6dF0gH5jS-_aEiOoUyTq",
	} {
		err := NewACL(mapState{}, clk, nil, fmt2).UseBootstrapToken(tok)
		if err == nil || strings.Contains(err.Error(), tok[len(tok)-20:]) {
			t.Errorf("%s: %v; want refused, not quoted", name, err)
		}
	}
}
