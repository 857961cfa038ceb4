package access

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
)

// BenchmarkCarry is what numbering a submission's record costs under the
// node's Sequencer (Trail.Carry, as a store's Late runs it): every write
// of the executor waits for it, and a group commit's cycle pays it once
// per submission it carries. The record is a submission's as the admin
// API builds it, the trail holds 10,000 records of 100 principals, and
// its indexes are known (a leader's usual state).
//
//	go test -run xxx -bench BenchmarkCarry -benchmem ./cluster/access/
func BenchmarkCarry(b *testing.B) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	l := runningTrail(b, st, clk, 1_000_000)
	req := &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "3", "note": "a submission as a client sends it"}, Nonce: "bench-nonce-0001"}
	begin := NewRecord(clk.Now(), "m1", Principal{Name: "bench"}, "SubmitProcedure", req, nil, nil)
	begin.Peer = "127.0.0.1:51234"
	var recs []*adminpb.AuditRecord
	for i := range 10_000 {
		rec := proto.Clone(begin).(*adminpb.AuditRecord)
		rec.Principal = "client-" + string(rune('a'+i%26)) + string(rune('a'+i/26%4))
		if recs = append(recs, rec); len(recs) == 500 {
			if err := l.Append(context.Background(), recs...); err != nil {
				b.Fatal(err)
			}
			recs = nil
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rec := proto.Clone(begin).(*adminpb.AuditRecord)
		rec.ProcIds = append(rec.ProcIds, uint64(i+1))
		st.seq.Do(func() {
			muts, done, ok := l.Carry(rec)
			if !ok {
				b.Fatal("not carried")
			}
			st.apply(muts)
			done(nil)
		})
	}
}
