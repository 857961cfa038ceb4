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
