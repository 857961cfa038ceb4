package adminpb

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// The names are what the API documents and scripts match on.
func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.FailedPrecondition: "FAILED_PRECONDITION",
		codes.NotFound:           "NOT_FOUND",
		codes.Unavailable:        "UNAVAILABLE",
		codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
		codes.Code(99):           "CODE(99)",
		codes.OK:                 "OK",
		codes.Unauthenticated:    "UNAUTHENTICATED",
	} {
		if got := CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
	}
}
