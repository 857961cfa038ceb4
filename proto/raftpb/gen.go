// Package raftpb holds the encoding of the replicated procedure log
// (raftfsm.proto and the code generated from it): the commands raftfsm
// applies. Regenerate with `make proto`.
package raftpb

//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I . --go_out=. --go_opt=paths=source_relative raftfsm.proto"
