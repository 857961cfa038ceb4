// Package integration holds Baton's end-to-end tests: real `node agent`
// processes on loopback ports (started by integration/harness), killed with
// SIGKILL, stopped with SIGTERM and restarted, plus in-process clusters of
// cluster.Node for the cases that need control over the network (a
// partition) or over Raft's snapshot settings, which the agent does not
// expose.
//
// The tests are bounded in time (each builds its own deadline) and the
// package runs in about a minute; give go test a -timeout anyway, since a
// hung cluster is exactly what these tests look for. A failing test keeps
// its cluster's data and logs and prints their paths (BATON_KEEP_LOGS=1
// keeps them always).
//
// The failover benchmark of issue 3 is TestFailoverTiming, off unless
// BATON_FAILOVER_BENCH is set:
//
//	BATON_FAILOVER_BENCH=20 go test -run TestFailoverTiming -v -timeout 10m ./integration/
package integration
