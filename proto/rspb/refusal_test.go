package rspb

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A refusal keeps the code and message a 0.1.0 master reads, and its
// detail is found through wrapping; other errors carry none.
func TestRefusal(t *testing.T) {
	meta := map[string]string{MetaServerTerm: "9"}
	err := Refusal(ReasonStaleTerm, meta, "stale term 7: this server has seen term 9")
	meta[MetaServerTerm] = "changed after"
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "stale term 7: this server has seen term 9" {
		t.Fatalf("refusal %v changed the code or message", err)
	}
	info := RefusalInfo(fmt.Errorf("dispatch: %w", err))
	if info.GetReason() != ReasonStaleTerm || info.GetDomain() != RefusalDomain || info.GetMetadata()[MetaServerTerm] != "9" {
		t.Fatalf("detail %v", info)
	}
	for _, e := range []error{
		nil,
		fmt.Errorf("plain"),
		status.Error(codes.FailedPrecondition, "stale term 7: this server has seen term 9"),
	} {
		if info := RefusalInfo(e); info != nil {
			t.Fatalf("RefusalInfo(%v) = %v, want nil", e, info)
		}
	}
}
