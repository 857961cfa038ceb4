// Package rspb holds the region-server protocol: regionserver.proto and the
// code generated from it. Regenerate with `make proto`.
package rspb

//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I . -I .. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative regionserver.proto"
