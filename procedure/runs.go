package procedure

import (
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Run is a stretch of a procedure's persisted writes made by one node: its
// writes First..Last (numbered from 1, the submission), from At to Until.
// A new Run starts when another node (another master, after a failover)
// writes the procedure, so a procedure that never moved has one Run.
type Run struct {
	Node        string
	First, Last uint32
	At, Until   time.Time
}

// maxRuns bounds a procedure's Runs: a procedure that moved between
// masters more often keeps the first and the latest ones, which is what
// one looks for (where it started, where it went last) at a bounded cost.
const maxRuns = 16

// noteWrite records the next write of a procedure, by node at t. Writes
// are numbered on from the last run's Last (the first run, kept when runs
// are trimmed, and the last one always stay).
func noteWrite(runs []Run, node string, t time.Time) []Run {
	t = t.Round(0) // as it reads back from the record: wall time only
	n := uint32(1)
	if k := len(runs); k > 0 {
		n = runs[k-1].Last + 1
	}
	// A new slice every time, runs left as they were: the record being
	// written and every Info handed out share the slice they were given
	// instead of copying it, at each write and each listener call.
	if k := len(runs); k > 0 && runs[k-1].Node == node {
		out := slices.Clone(runs)
		out[k-1].Last, out[k-1].Until = n, t
		return out
	}
	out := make([]Run, 0, len(runs)+1)
	out = append(out, runs...)
	out = append(out, Run{Node: node, First: n, Last: n, At: t, Until: t})
	if len(out) > maxRuns {
		out = append(out[:1], out[len(out)-maxRuns+1:]...)
	}
	return out
}

const (
	fRunNode protowire.Number = iota + 1
	fRunFirst
	fRunLast
	fRunAt
	fRunUntil
	// A finished root's runs are written relative to its submission
	// (marshalRunRelative): At as milliseconds after it, Until as
	// milliseconds after At.
	fRunAtMs
	fRunSpanMs
)

// marshalRunRelative encodes r for a finished root's record, its times
// relative to the submission: a dozen bytes less than marshalRun.
func marshalRunRelative(r Run, submitted time.Time) []byte {
	var b []byte
	if r.Node != "" {
		b = protowire.AppendTag(b, fRunNode, protowire.BytesType)
		b = protowire.AppendString(b, r.Node)
	}
	at := r.At.Sub(submitted).Milliseconds()
	if r.First != 1 { // the first run's, read back as 1 when left out
		b = appendVarint(b, fRunFirst, uint64(r.First))
	}
	b = appendVarint(b, fRunLast, uint64(r.Last))
	b = appendVarint(b, fRunAtMs, protowire.EncodeZigZag(at))
	b = appendVarint(b, fRunSpanMs, protowire.EncodeZigZag(r.Until.Sub(r.At).Milliseconds()))
	return b
}

// runRaw is a Run as read, its times possibly relative to a submission
// not known yet.
type runRaw struct {
	run          Run
	atMs, spanMs int64
	relative     bool
}

func (r runRaw) resolve(submitted time.Time) Run {
	if r.relative && r.run.First == 0 {
		r.run.First = 1
	}
	if r.relative && !submitted.IsZero() {
		r.run.At = submitted.Add(time.Duration(r.atMs) * time.Millisecond)
		r.run.Until = r.run.At.Add(time.Duration(r.spanMs) * time.Millisecond)
	}
	return r.run
}

func marshalRun(r Run) []byte {
	var b []byte
	if r.Node != "" {
		b = protowire.AppendTag(b, fRunNode, protowire.BytesType)
		b = protowire.AppendString(b, r.Node)
	}
	for _, f := range []struct {
		n protowire.Number
		v uint64
	}{{fRunFirst, uint64(r.First)}, {fRunLast, uint64(r.Last)}, {fRunAt, uint64(unixNano(r.At))}, {fRunUntil, uint64(unixNano(r.Until))}} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.n, protowire.VarintType)
			b = protowire.AppendVarint(b, f.v)
		}
	}
	return b
}

// unmarshalRun's switch, like the other decoders' (record, history,
// child summaries), is deliberately its own: each reads a format frozen
// since 0.1.0 field by field, and a shared decoder would let a change
// meant for one format alter what another reads.
func unmarshalRun(b []byte) (runRaw, error) {
	var raw runRaw
	r := &raw.run
	raw.relative = true // unless it has an absolute time
	err := walkFields(b, "run ", func(num protowire.Number, v uint64) {
		switch num {
		case fRunFirst:
			r.First = uint32(v)
		case fRunLast:
			r.Last = uint32(v)
		case fRunAt:
			r.At, raw.relative = fromUnixNano(int64(v)), false
		case fRunUntil:
			r.Until, raw.relative = fromUnixNano(int64(v)), false
		case fRunAtMs:
			raw.atMs = protowire.DecodeZigZag(v)
		case fRunSpanMs:
			raw.spanMs = protowire.DecodeZigZag(v)
		}
	}, func(num protowire.Number, v []byte) error {
		if num == fRunNode {
			r.Node = string(v)
		}
		return nil
	})
	if err != nil {
		return runRaw{}, err
	}
	return raw, nil
}
