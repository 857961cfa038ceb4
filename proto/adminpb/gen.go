// Package adminpb holds Baton's admin API: admin.proto and the code
// generated from it. Regenerate with `make proto`.
package adminpb

//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I . -I .. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative admin.proto"
