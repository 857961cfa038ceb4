package clustertest

import (
	"testing"

	"github.com/baton-dev/baton/internal/testnet"
)

// DeadAddr returns a loopback address nothing listens on, nor can while t
// runs: a master that is down for good, for tests of how clients skip or
// give up on it.
func DeadAddr(t testing.TB) string {
	t.Helper()
	return testnet.DeadAddr(t)
}
