// Package locked reads a field under the mutex that guards it: the
// one-field getters of types guarded by one mutex (an address bound at
// Start, a counter, a term) become one line each rather than three.
package locked

import "sync"

// Load returns *v read while holding mu; for a sync.RWMutex pass
// mu.RLocker() to read under the read lock.
func Load[T any](mu sync.Locker, v *T) T {
	mu.Lock()
	defer mu.Unlock()
	return *v
}

// Call returns f's result computed while holding mu, for getters that
// derive their answer from guarded state (a length, a nil check) rather
// than read one field.
func Call[T any](mu sync.Locker, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}
