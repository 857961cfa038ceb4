package testwait

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	if !Until(time.Minute, func() bool { return calls.Add(1) >= 3 }) {
		t.Fatal("Until gave up on a condition that came true")
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3 (no call after it held)", got)
	}
}

func TestUntilGivesUpAtTheDeadline(t *testing.T) {
	if Until(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never held")
	}
}

func TestErrCarriesTheLastReason(t *testing.T) {
	var n int
	err := Err(20*time.Millisecond, "the answer", func() error {
		n++
		return fmt.Errorf("attempt %d: %w", n, errors.ErrUnsupported)
	})
	if err == nil || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Err = %v, want the last reason wrapped", err)
	}
	if Err(time.Second, "nothing", func() error { return nil }) != nil {
		t.Fatal("Err failed a check that passed")
	}
}

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestForNamesWhatItWaitedFor(t *testing.T) {
	ft := &fakeT{TB: t}
	For(ft, 10*time.Millisecond, "the moon", func() bool { return false })
	if ft.failed == "" || !strings.Contains(ft.failed, "the moon") {
		t.Fatalf("failure %q does not name the condition", ft.failed)
	}
	ft = &fakeT{TB: t}
	ForNil(ft, 10*time.Millisecond, "quorum", func() error { return errors.New("1 of 3 voters") })
	if !strings.Contains(ft.failed, "quorum") || !strings.Contains(ft.failed, "1 of 3 voters") {
		t.Fatalf("failure %q lacks the condition or its last reason", ft.failed)
	}
}
