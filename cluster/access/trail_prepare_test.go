package access

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// randomRecord is a record with any of the fields the numbering and the
// carrying set, or none, and others that need sanitizing.
func randomRecord(rng *rand.Rand) *adminpb.AuditRecord {
	r := &adminpb.AuditRecord{Principal: fmt.Sprintf("p%d", rng.IntN(3)), Method: "SubmitProcedure", Code: "OK",
		AtUnixMs: rng.Int64N(1 << 42), Peer: fmt.Sprintf("10.0.0.%d:%d", rng.IntN(4), 1000+rng.IntN(9000))}
	if rng.IntN(2) == 0 {
		r.Args = `{"type":"sleep","arguments":{"note":"` + strings.Repeat("\x01é\n", rng.IntN(40)) + `"}}`
	}
	if rng.IntN(3) == 0 {
		r.Message = strings.Repeat("x", rng.IntN(2*FieldMax))
	}
	if rng.IntN(3) == 0 {
		r.CommittedUnixMs = rng.Int64N(1 << 42)
	}
	if rng.IntN(4) == 0 {
		r.Id = "stale-id"
	}
	for range rng.IntN(3) * rng.IntN(60) {
		r.ProcIds = append(r.ProcIds, rng.Uint64N(1<<uint(1+rng.IntN(63))))
	}
	return r
}

// TestPreparedRecordsStoreAsMarshalled: a group made of prepared records
// (their bytes made before the numbering, the numbered fields appended)
// reads back as the same records, numbered, as proto.Marshal of each
// would have stored them; so does a record whose bytes could not be made
// before (encoded whole at the fold). Each is sanitized, holds the
// carried procedure's id once and at most 100, and the group's newest
// commit time is its newest record's.
func TestPreparedRecordsStoreAsMarshalled(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	rng := rand.New(rand.NewPCG(33, 4))
	for round := range 200 {
		var preps []*Prepared
		var keys []string
		want := map[*Prepared]*adminpb.AuditRecord{}
		for i := range 1 + rng.IntN(12) {
			r := randomRecord(rng)
			p := l.Prepare(r)
			if i%5 == 4 {
				p.wire = nil
			}
			proc := rng.Uint64N(1 << 40)
			if rng.IntN(4) == 0 && len(r.ProcIds) > 0 {
				proc = r.ProcIds[0] // already listed
			}
			exp := proto.Clone(r).(*adminpb.AuditRecord)
			SanitizeRecord(exp)
			if proc != 0 && len(exp.ProcIds) < procIDsMax && !containsID(exp.ProcIds, proc) {
				exp.ProcIds = append(exp.ProcIds, proc)
			}
			st.under(func() {
				muts, _, ok := l.CarryPrepared(p, proc)
				if !ok || len(muts) != 1 {
					t.Fatalf("round %d: CarryPrepared: %v %v", round, muts, ok)
				}
				keys = append(keys, muts[0].Key)
			})
			preps = append(preps, p)
			want[p] = exp
		}
		st.under(func() {
			muts, done, err := st.folder.Fold(keys)
			if err != nil {
				t.Fatalf("round %d: fold: %v", round, err)
			}
			byID := map[string]*adminpb.AuditRecord{}
			for _, m := range muts {
				if !strings.HasPrefix(m.Key, AuditPrefix) || m.Value == nil {
					continue
				}
				raw, ok := groupRecords(m.Value)
				if !ok {
					t.Fatalf("round %d: %s is no group", round, m.Key)
				}
				newest := int64(0)
				for _, b := range raw {
					got := new(adminpb.AuditRecord)
					if err := proto.Unmarshal(b, got); err != nil {
						t.Fatalf("round %d: %s: %v", round, m.Key, err)
					}
					byID[got.GetId()] = got
					newest = max(newest, got.GetCommittedUnixMs())
				}
				if c, ok := committedUnixMs(m.Value); !ok || c != newest {
					t.Fatalf("round %d: %s: the group's commit time %d, its newest record's %d", round, m.Key, c, newest)
				}
			}
			for _, p := range preps {
				exp := want[p]
				exp.Id, exp.CommittedUnixMs = p.Record().GetId(), p.Record().GetCommittedUnixMs()
				if exp.Id == "" || exp.CommittedUnixMs == 0 {
					t.Fatalf("round %d: not numbered: %v", round, p.Record())
				}
				got := byID[exp.Id]
				if !proto.Equal(got, exp) {
					t.Fatalf("round %d: stored\n%v\nwant\n%v", round, got, exp)
				}
				if !proto.Equal(p.Record(), exp) {
					t.Fatalf("round %d: the carried record\n%v\nwant what is stored\n%v", round, p.Record(), exp)
				}
				if len(got.GetProcIds()) > procIDsMax {
					t.Fatalf("round %d: %d procedure ids", round, len(got.GetProcIds()))
				}
			}
			done(nil)
		})
	}
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestCarryPreparedBelowFormat2: below cluster version 2 a prepared
// record is written alone, as Carry writes it, with the procedure's id.
func TestCarryPreparedBelowFormat2(t *testing.T) {
	f := version.Format1
	l, st := groupingTrail(t, &f)
	p := l.Prepare(&adminpb.AuditRecord{Principal: "a", Method: "SubmitProcedure", Code: "OK", Args: "\x00"})
	st.under(func() {
		muts, done, ok := l.CarryPrepared(p, 42)
		if !ok || len(muts) == 0 || !strings.HasPrefix(muts[0].Key, AuditPrefix) {
			t.Fatalf("CarryPrepared: %v %v", muts, ok)
		}
		got := new(adminpb.AuditRecord)
		if err := proto.Unmarshal(muts[0].Value, got); err != nil {
			t.Fatal(err)
		}
		if got.GetId() == "" || !containsID(got.GetProcIds(), 42) || got.GetArgs() == "\x00" {
			t.Fatalf("stored %v: want it numbered, with procedure 42, sanitized", got)
		}
		done(nil)
	})
}

// BenchmarkFoldEntry is what the records of one entry cost under the
// node's Sequencer, where the group commit waits for them: 64
// submissions' records carried and folded into a group, as a
// submission's record is made by the admin API. prepared makes each
// ready first (Trail.Prepare, as the interceptor does as the call
// starts); carried hands the record to Carry, which prepares it there.
// Reported: the Sequencer's time per record (sequencer-ns/record).
//
//	go test -run xxx -bench BenchmarkFoldEntry ./cluster/access/
func BenchmarkFoldEntry(b *testing.B) {
	req := &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}
	begin := NewRecord(time.Unix(1_000_000, 0), "m1", Principal{Name: "bench"}, "SubmitProcedure", req, nil, nil)
	begin.Peer = "127.0.0.1:51234"
	const perEntry = 64
	for _, prepared := range []bool{false, true} {
		b.Run(map[bool]string{false: "carried", true: "prepared"}[prepared], func(b *testing.B) {
			f := version.Format2
			l, st := groupingTrail(b, &f)
			l.spaces[0].PerHolder, l.spaces[0].Max = 1<<30, 1<<30
			var under time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				preps := make([]*Prepared, perEntry)
				recs := make([]*adminpb.AuditRecord, perEntry)
				for j := range recs {
					recs[j] = proto.Clone(begin).(*adminpb.AuditRecord)
					if prepared {
						preps[j] = l.Prepare(recs[j])
					}
				}
				start := time.Now()
				st.under(func() {
					keys := make([]string, perEntry)
					for j := range recs {
						id := uint64(i*perEntry + j + 1)
						var muts []raftfsm.Mutation
						var ok bool
						if prepared {
							muts, _, ok = l.CarryPrepared(preps[j], id)
						} else {
							recs[j].ProcIds = append(recs[j].ProcIds, id)
							muts, _, ok = l.Carry(recs[j])
						}
						if !ok || len(muts) != 1 {
							b.Fatal("not carried")
						}
						keys[j] = muts[0].Key
					}
					muts, done, err := st.folder.Fold(keys)
					if err != nil {
						b.Fatal(err)
					}
					st.apply(muts)
					done(nil)
				})
				under += time.Since(start)
			}
			b.ReportMetric(float64(under.Nanoseconds())/float64(b.N*perEntry), "sequencer-ns/record")
		})
	}
}
