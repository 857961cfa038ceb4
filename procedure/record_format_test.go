package procedure

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// fields010 are the record's field numbers 0.1.0 reads
// (fa4612c:procedure/record.go: fID..fRuns, fHistory, fTrace,
// fHistoryPacked, fChildren): what a record written at format 1 may hold.
var fields010 = func() []protowire.Number {
	var out []protowire.Number
	for n := fID; n <= fRuns; n++ {
		out = append(out, n)
	}
	return append(out, fHistory, fTrace, fHistoryPacked, fChildren)
}()

// recordFields are the field numbers of the record data, in order.
func recordFields(t *testing.T, data []byte) []protowire.Number {
	t.Helper()
	var out []protowire.Number
	err := walkFields(data, "", func(n protowire.Number, _ uint64) { out = append(out, n) },
		func(n protowire.Number, _ []byte) error { out = append(out, n); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stored is procedure id's persisted record in st; the test fails
// without one.
func stored(t *testing.T, st store.Store, id uint64) []byte {
	t.Helper()
	data, ok := storedData(t, st, id)
	if !ok {
		t.Fatalf("procedure %d not stored", id)
	}
	return data
}

// TestRecordFormatGate: the fields format 2 added to the record (113, a
// finished root's child summaries; 114, the submitter) are written only
// when Config.RecordFormat allows format 2. At format 1 (a nil gate too)
// every record, live, finished or acknowledged, holds only fields 0.1.0
// reads; the submitter is not kept (the procedure is no one's, as 0.1.0
// would leave it), and Get of a child of the finished root answers
// NotFound as for a root an older release finished, its Info still listing
// its children. At format 2 both fields are written.
func TestRecordFormatGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func(*atomic.Uint32) version.Gate
		want version.Format
	}{
		{"nil gate", func(*atomic.Uint32) version.Gate { return nil }, version.Format1},
		{"format 1", func(f *atomic.Uint32) version.Gate {
			return func() version.Format { return version.Format(f.Load()) }
		}, version.Format1},
		{"format 2", func(f *atomic.Uint32) version.Gate {
			return func() version.Format { return version.Format(f.Load()) }
		}, version.Format2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f atomic.Uint32
			f.Store(uint32(tc.want))
			mem := store.NewMemStore()
			gate := make(chan struct{})
			h := startExecutor(t, mem, newDomain(), func(c *Config) {
				c.Registry = forgetRegistry(t)
				c.Registry.MustRegister("fmtgated", 1, func() Procedure { return &gated{gate: gate} })
				c.RecordFormat = tc.gate(&f)
			})
			at2 := tc.want >= version.Format2
			check := func(what string, data []byte) {
				t.Helper()
				got := recordFields(t, data)
				if has := slices.Contains(got, fSubmitter); has != at2 {
					t.Errorf("%s: field 114 (submitter) written: %v, want %v (fields %v)", what, has, at2, got)
				}
				if !at2 {
					for _, n := range got {
						if !slices.Contains(fields010, n) {
							t.Errorf("%s at format 1: field %d, which 0.1.0 does not read", what, n)
						}
					}
				}
			}

			live := h.submit(&gated{gate: gate}, SubmitOptions{Owner: "o", Submitter: "client/ops"})
			check("a live record", stored(t, mem, live))
			if info, _ := h.x.Get(live); (info.Submitter == "client/ops") != at2 {
				t.Errorf("Get's submitter %q at %s", info.Submitter, tc.want)
			}
			close(gate)
			h.wait(live)

			id := h.submit(&fgRoot{Parent: fgParent{Name: uniq("P"), Kids: 3, Steps: 1, FailKid: -1}}, SubmitOptions{Submitter: "client/ops"})
			if info := h.wait(id); info.State != Success {
				t.Fatalf("ended %s (%s)", info.State, info.Error)
			}
			data := stored(t, mem, id)
			check("a finished root", data)
			if has := slices.Contains(recordFields(t, data), fChildSummaries); has != at2 {
				t.Errorf("field 113 (child summaries) written: %v, want %v", has, at2)
			}
			if _, _, kept, err := ChildSummaryInfos(data); err != nil || kept != at2 {
				t.Errorf("ChildSummaryInfos: kept %v, %v", kept, err)
			}
			kids := childIDs(t, h.x, id)
			if len(kids) != 1 {
				t.Fatalf("root's children %v, want its one parent", kids)
			}
			_, err := h.x.Get(kids[0])
			if at2 && err != nil {
				t.Fatalf("Get of a summarised child: %v", err)
			}
			if !at2 && !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a child of a root finished at format 1: %v, want NotFound", err)
			}
			if err := h.x.Ack(id); err != nil {
				t.Fatal(err)
			}
			check("an acknowledged root", stored(t, mem, id))
		})
	}
}
