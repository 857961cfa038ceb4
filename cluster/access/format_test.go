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
