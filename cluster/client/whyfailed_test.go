package client

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// TestWhyFailed: each address's failure in a few words, and a master's own
// answer (it carries a LeaderHint) is never taken for the network's, even
// when it quotes a refused connection to the leader it forwards to.
func TestWhyFailed(t *testing.T) {
	masterSaid := func(msg, hint string) error {
		st, err := status.New(codes.Unavailable, msg).WithDetails(&adminpb.LeaderHint{LeaderAdminAddress: hint})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), "connection refused"},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "timed out"},
		{context.DeadlineExceeded, "timed out"},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`), "timed out: connected, but no gRPC handshake (hung, or not an admin port)"},
		{masterSaid("admin: no leader known (election under way?); retry shortly", ""), "not the leader: admin: no leader known (election under way?); retry shortly"},
		{masterSaid("admin: forwarding to m1 at h:1: connection refused", "h:1"), "not the leader (it names h:1): admin: forwarding to m1 at h:1: connection refused"},
		{status.Error(codes.Unavailable, "something else"), "something else"},
	} {
		if got := whyFailed(tc.err); got != tc.want {
			t.Errorf("whyFailed(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A try that the call's deadline cuts short does not replace what the
// address answered before: "not the leader" stays its account, and an
// address never answered is said to have timed out.
func TestNoteTryKeepsTheLastAnswerOverTheDeadline(t *testing.T) {
	f := &FollowFailure{Errs: map[string]error{}}
	notLeader := status.Error(codes.Unavailable, "admin: no leader known (election under way?); retry shortly")
	f.noteTry(context.Background(), "a", notLeader)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	f.noteTry(ended, "a", status.Error(codes.Unavailable, "transport is closing"))
	f.noteTry(ended, "b", status.Error(codes.Unavailable, "transport is closing"))
	if f.Errs["a"] != notLeader {
		t.Errorf("a's account after a cut try: %v, want its earlier answer", f.Errs["a"])
	}
	if status.Code(f.Errs["b"]) != codes.Canceled {
		t.Errorf("b's account: %v, want the context's end", f.Errs["b"])
	}
	if len(f.Tried) != 2 {
		t.Errorf("tried %v, want a and b", f.Tried)
	}
}
