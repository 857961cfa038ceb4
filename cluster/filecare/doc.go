// Package filecare looks after the master node's files on disk, outside
// raft's own handling of them: it checks raft.db (the raft log and stable
// store, one bbolt file) and raft's snapshots before raft may meet them,
// rewrites a raft.db that bbolt has left many times the size of the log it
// holds, and keeps the data directory and every snapshot private to its
// owner. Each is a start-up step of cluster.NewNode (the cluster package
// documentation, A node and Damaged files at start, says when and why);
// none needs raft running, so each can be tested on files alone.
//
// The package reads bbolt's page layout itself (pagewalk.go): bbolt trusts
// its pages, and on some damage faults, panics or loops for ever.
package filecare
