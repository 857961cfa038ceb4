package locked

import (
	"sync"
	"testing"
)

func TestLoad(t *testing.T) {
	var mu sync.Mutex
	v := 7
	if got := Load(&mu, &v); got != 7 {
		t.Errorf("Load = %d, want 7", got)
	}
	if !mu.TryLock() {
		t.Error("Load left the mutex locked")
	}
	var rw sync.RWMutex
	s := "x"
	if got := Load(rw.RLocker(), &s); got != "x" {
		t.Errorf("Load(RLocker) = %q", got)
	}
	if !rw.TryLock() {
		t.Error("Load left the read lock held")
	}
}

func TestCall(t *testing.T) {
	var mu sync.Mutex
	m := map[string]int{"a": 1, "b": 2}
	if got := Call(&mu, func() int {
		if mu.TryLock() {
			t.Error("Call ran f without holding the mutex")
		}
		return len(m)
	}); got != 2 {
		t.Errorf("Call = %d, want 2", got)
	}
	if !mu.TryLock() {
		t.Error("Call left the mutex locked")
	}
}
