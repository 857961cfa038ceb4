// Package rspb holds the generated code of the region-server protocol
// (../../proto/regionserver.proto). Regenerate with `make proto`.
package rspb

//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I ../../proto --go_out=. --go_opt=module=github.com/baton-dev/baton/cluster/rspb --go-grpc_out=. --go-grpc_opt=module=github.com/baton-dev/baton/cluster/rspb ../../proto/regionserver.proto"
