package client

import "github.com/baton-dev/baton/proto/adminpb"

// Reads are linearizable unless asked otherwise (see proto/adminpb/admin.proto):
// the answer reflects every write acknowledged before the call. Stale()
// lets any master answer at once from its own state, which may lag.

// ReadOption tunes one read.
type ReadOption func(*readOptions)

type readOptions struct {
	consistency adminpb.Consistency
	into        **adminpb.ReadInfo
}

// Stale lets the first master reached answer from its local state without
// asking the leader: faster, and available without a quorum, but it may
// miss recent writes (how many, the ReadInfo's applied index and leader
// contact age tell).
func Stale() ReadOption {
	return func(o *readOptions) { o.consistency = adminpb.Consistency_STALE }
}

// WithConsistency sets the read's consistency.
func WithConsistency(c adminpb.Consistency) ReadOption {
	return func(o *readOptions) { o.consistency = c }
}

// Served stores the answer's ReadInfo (which node served the read, at
// which applied index and consistency) in *dst, for reads whose result
// carries none of its own (lists).
func Served(dst **adminpb.ReadInfo) ReadOption {
	return func(o *readOptions) { o.into = dst }
}

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// served records ri for Served.
func (o readOptions) served(ri *adminpb.ReadInfo) {
	if o.into != nil && ri != nil {
		*o.into = ri
	}
}
