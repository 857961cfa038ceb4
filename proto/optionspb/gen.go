// Package optionspb holds the options Baton's protos declare their RPCs'
// rules and their request fields' limits with (options.proto and the code
// generated from it), and Rules and Limits, which read them from a
// service's descriptor. Regenerate with `make proto`.
package optionspb

// Compiled from proto/ as optionspb/options.proto, the name the importing
// protos use (and the one registered: a bare "options.proto" could clash
// with another module's).
//go:generate sh -c "PATH=\"$(go env GOBIN):$(go env GOPATH)/bin:$PATH\" protoc -I .. --go_out=.. --go_opt=paths=source_relative ../optionspb/options.proto"
