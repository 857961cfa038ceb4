// Package testnet holds network helpers for tests.
package testnet

import "testing"

// DeadAddr returns a loopback address where connections are refused for
// as long as t runs.
//
// Closing a listener and handing out its address is not enough: the port
// is free from then on, and on a machine running other tests some other
// listener soon takes it and answers (a dead master that turns out to be
// another test's leader). Where the system allows it (unix), the port
// stays bound, without listening, until t ends: nobody else can listen
// there, and connections are refused.
func DeadAddr(t testing.TB) string {
	t.Helper()
	return deadAddr(t)
}
