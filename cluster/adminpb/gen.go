// Package adminpb holds the generated code of Baton's admin API
// (../../proto/admin.proto). Regenerate with `make proto`.
package adminpb

//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I ../../proto --go_out=. --go_opt=module=github.com/baton-dev/baton/cluster/adminpb --go-grpc_out=. --go-grpc_opt=module=github.com/baton-dev/baton/cluster/adminpb ../../proto/admin.proto"
