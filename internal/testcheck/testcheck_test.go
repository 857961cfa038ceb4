package testcheck

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that notes failures instead of failing, so the
// checks' own failures can be asserted on.
type recorder struct {
	testing.TB
	failed, stopped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed, r.stopped = true, true; panic(r) }

func judge(t *testing.T, err error, want ...string) (refused bool, rec *recorder) {
	rec = &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != any(rec) {
			panic(p)
		}
	}()
	return Refusal(rec, err, want), rec
}

func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		err                      error
		want                     []string
		refused, failed, stopped bool
	}{
		{"valid", nil, nil, false, false, false},
		{"valid but refused", errors.New("x is bad"), nil, false, true, true},
		{"refused as wanted", errors.New("x is bad; y is bad"), []string{"x is bad", "y is bad"}, true, false, false},
		{"refused without a reason", errors.New("x is bad"), []string{"x is bad", "y is bad"}, true, true, false},
		{"accepted but invalid", nil, []string{"x is bad"}, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, rec := judge(t, tc.err, tc.want...)
			if rec.stopped != tc.stopped || rec.failed != tc.failed {
				t.Fatalf("failed %v stopped %v, want %v %v", rec.failed, rec.stopped, tc.failed, tc.stopped)
			}
			if !tc.stopped && refused != tc.refused {
				t.Errorf("refused = %v, want %v", refused, tc.refused)
			}
		})
	}
}
