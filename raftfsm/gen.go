package raftfsm

// The protobuf code in raftpb/ is generated from ../proto/raftfsm.proto and
// committed, so building and testing need no protoc. To regenerate, install
// protoc and protoc-gen-go (go install google.golang.org/protobuf/cmd/protoc-gen-go)
// and run go generate ./raftfsm/... ; protoc-gen-go is looked up in GOBIN,
// then GOPATH/bin, then PATH.
//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I ../proto --go_out=. --go_opt=module=github.com/baton-dev/baton/raftfsm ../proto/raftfsm.proto"
