package access

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
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
				raw, ok := storedValues(m.Key, m.Value)
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

// carriedBefore is what the code before Trail.Prepare stored for a call's
// record first carried with procedure id: the interceptor appended id
// (if not listed), Carry sanitized and cleared the id, the fold numbered
// it and proto.Marshal'ed it.
func carriedBefore(first *adminpb.AuditRecord, id uint64, numberedID string, committed int64) *adminpb.AuditRecord {
	r := proto.Clone(first).(*adminpb.AuditRecord)
	if id != 0 && !containsID(r.ProcIds, id) {
		r.ProcIds = append(r.ProcIds, id)
	}
	SanitizeRecord(r)
	r.Id = numberedID
	if r.CommittedUnixMs == 0 {
		r.CommittedUnixMs = committed
	}
	return r
}

func idsFrom(from, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(from + i)
	}
	return out
}

// TestPreparedEdgeCasesStoreAsBefore: each edge case, carried prepared
// and folded, is stored as the code before stored it: the same record
// (decoded), as many bytes as proto.Marshal of it, no field left unknown
// but one it came with; the record the interceptor gets back (Record) is
// what is stored, and the retention reads its commit time.
func TestPreparedEdgeCasesStoreAsBefore(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "future")
	okRec := func(procs []uint64) func() *adminpb.AuditRecord {
		return func() *adminpb.AuditRecord { return &adminpb.AuditRecord{Principal: "a", Code: "OK", ProcIds: procs} }
	}
	committedAt := func(ms int64) func() *adminpb.AuditRecord {
		return func() *adminpb.AuditRecord {
			return &adminpb.AuditRecord{Principal: "a", Code: "OK", CommittedUnixMs: ms}
		}
	}
	cases := []struct {
		name    string
		rec     func() *adminpb.AuditRecord
		proc    uint64
		wireNil bool
	}{
		{"empty", okRec(nil), 1, false},
		{"empty, no procedure", okRec(nil), 0, false},
		{"empty, encoded at the fold", okRec(nil), 5, true},
		{"negative commit time", committedAt(-1), 9, false},
		{"least commit time", committedAt(math.MinInt64), 9, false},
		{"greatest commit time", committedAt(math.MaxInt64), 9, false},
		{"huge procedure ids", okRec([]uint64{math.MaxUint64, 1 << 63}), math.MaxUint64 - 1, false},
		{"99 ids and a new one", okRec(idsFrom(1, 99)), 1000, false},
		{"100 ids and a new one", okRec(idsFrom(1, 100)), 1000, false},
		{"100 ids and a listed one", okRec(idsFrom(1, 100)), 50, false},
		{"101 ids and a new one", okRec(idsFrom(1, 101)), 1000, false},
		{"101 ids and the 101st", okRec(idsFrom(1, 101)), 101, false},
		{"101 ids, encoded at the fold", okRec(idsFrom(1, 101)), 7, true},
		{"stale id and fields to sanitize", func() *adminpb.AuditRecord {
			return &adminpb.AuditRecord{Id: "9-9", Principal: "a\x00b", Args: strings.Repeat("\xff", 3*FieldMax), Code: "OK", Peer: "[::1]:80"}
		}, 3, false},
		{"unknown field", func() *adminpb.AuditRecord {
			r := &adminpb.AuditRecord{Principal: "a", Code: "OK"}
			r.ProtoReflect().SetUnknown(unknown)
			return r
		}, 3, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := version.Format2
			l, st := groupingTrail(t, &f)
			first := c.rec()
			p := l.Prepare(proto.Clone(first).(*adminpb.AuditRecord))
			if c.wireNil {
				p.wire = nil
			}
			var key string
			st.under(func() {
				muts, _, ok := l.CarryPrepared(p, c.proc)
				if !ok || len(muts) != 1 {
					t.Fatalf("CarryPrepared: %v %v", muts, ok)
				}
				key = muts[0].Key
			})
			st.under(func() {
				muts, done, err := st.folder.Fold([]string{key})
				if err != nil {
					t.Fatal(err)
				}
				defer done(nil)
				var raw [][]byte
				for _, m := range muts {
					if !strings.HasPrefix(m.Key, AuditPrefix) || m.Value == nil {
						continue
					}
					rs, ok := storedValues(m.Key, m.Value)
					if !ok {
						t.Fatalf("%s is no group", m.Key)
					}
					raw = append(raw, rs...)
					var g adminpb.AuditRecordGroup
					if err := proto.Unmarshal(m.Value, &g); err != nil || len(g.ProtoReflect().GetUnknown()) != 0 {
						t.Fatalf("the group: %v, unknown %x", err, g.ProtoReflect().GetUnknown())
					}
				}
				if len(raw) != 1 {
					t.Fatalf("%d records stored", len(raw))
				}
				got := new(adminpb.AuditRecord)
				if err := proto.Unmarshal(raw[0], got); err != nil {
					t.Fatal(err)
				}
				if u := got.ProtoReflect().GetUnknown(); c.name != "unknown field" && len(u) != 0 {
					t.Fatalf("the stored record has unknown bytes %x", u)
				}

				if !proto.Equal(got, p.Record()) {
					t.Fatalf("stored\n%v\nthe carried record\n%v", got, p.Record())
				}
				if want := carriedBefore(first, c.proc, got.GetId(), got.GetCommittedUnixMs()); !proto.Equal(got, want) {
					t.Fatalf("stored\n%v\nthe code before stored\n%v", got, want)
				}
				if ms, ok := committedUnixMs(raw[0]); !ok || ms != got.GetCommittedUnixMs() {
					t.Fatalf("the retention reads %d %v, want %d", ms, ok, got.GetCommittedUnixMs())
				}
			})
		})
	}
}

// TestCarryPreparedTwiceNumbersAfresh: a record carried again is
// numbered again, as Carry numbers "whatever it held": below cluster
// version 2, where CarryPrepared numbers at once, the id its first
// carrying gave it is not taken for an outcome to write over that key.
func TestCarryPreparedTwiceNumbersAfresh(t *testing.T) {
	f := version.Format1
	l, st := groupingTrail(t, &f)
	p := l.Prepare(&adminpb.AuditRecord{Principal: "a", Method: "SubmitProcedure", Code: "OK"})
	var keys []string
	for _, id := range []uint64{1, 2} {
		st.under(func() {
			muts, done, ok := l.CarryPrepared(p, id)
			if !ok {
				t.Fatal("not carried")
			}
			for _, m := range muts {
				if strings.HasPrefix(m.Key, AuditPrefix) {
					keys = append(keys, m.Key)
				}
			}
			done(nil)
		})
	}
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("carried twice under keys %v: want two records numbered apart", keys)
	}
}

// TestPrepareBesideFolds: records are prepared on many goroutines while
// others carry and fold under the Sequencer (for -race).
func TestPrepareBesideFolds(t *testing.T) {
	f := version.Format2
	l, st := groupingTrail(t, &f)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				p := l.Prepare(&adminpb.AuditRecord{Principal: string(rune('a' + g%3)), Code: "OK", Peer: "10.0.0.1:1"})
				st.under(func() {
					muts, _, ok := l.CarryPrepared(p, uint64(g*1000+i+1))
					if !ok {
						t.Error("not carried")
						return
					}
					out, done, err := st.folder.Fold([]string{muts[0].Key})
					if err != nil {
						t.Error(err)
						return
					}
					st.apply(out)
					done(nil)
				})
				if p.Record().GetId() == "" {
					t.Error("folded, not numbered")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// storedValues are the records of the group stored under key with value
// v, as every reader of the trail sees them (StoredRecords); ok is false
// for no group.
func storedValues(key string, v []byte) ([][]byte, bool) {
	if _, _, _, ok := parseGroupSuffix(strings.TrimPrefix(key, AuditPrefix)); !ok {
		return nil, false
	}
	recs := StoredRecords(strings.TrimPrefix(key, AuditPrefix), v)
	if len(recs) == 0 {
		return nil, false
	}
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = r.Value
	}
	return out, true
}
