package procedure

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/tracectx"
)

// record is the persisted form of a procedure: the framework's fields plus
// the type's own state. It is encoded in protobuf wire format by hand (there
// is one message and it must stay readable by older and newer binaries:
// unknown fields are skipped, missing ones read as zero).
type record struct {
	id, parent, root uint64
	typeName         string
	typeVersion      int
	state            State
	owner, nonce     string
	submitter        string
	submitted        int64 // unix nanos
	updated          int64
	deadline         int64 // whole-procedure deadline, 0 = none
	waitUntil        int64 // end of a timed suspension, 0 = none
	stack            []int32
	locked           bool
	errMsg           string
	errCode          string
	result           []byte
	data             []byte
	abort            bool
	paused           bool
	bypass           bool
	rollingBack      bool
	repeats          int32
	spins            int32 // consecutive More outcomes of one state, see StateMachine.MaxRepeats
	ackedAt          int64
	finishedAt       int64
	// state-machine fields
	sm        bool
	smStarted bool
	smEOF     bool
	smNext    int32
	smHistory []int32
	// runs says which node made which of the record's persisted writes
	// (see Run); the last run's Last counts them.
	runs []Run
	// history is the bounded timeline of the procedure's transitions (see
	// Transition), as read. A record that is written carries it encoded
	// instead (historyEnc, then historyLast: see history.encoded). While
	// a record is read, historyRaw holds its encoded entries until
	// submitted, their time base, is known.
	history                 []Transition
	historyEnc, historyLast []byte
	historyRaw              [][]byte
	// historyPacked is a finished root's history as read, packed (see
	// appendPackedHistory); decoded once its runs are known.
	historyPacked []byte
	// runsRaw holds the runs as read until submitted, the time base of a
	// finished root's runs, is known.
	runsRaw []runRaw
	// children are a finished root's children (their records are deleted
	// when it finishes), written with its terminal record only; packed as
	// read until the record's id is known.
	children       []uint64
	childrenPacked []byte
	// summaries is a finished root's fChildSummaries message (see
	// childsummary.go), written with its terminal record only and kept
	// as read: an Ack writes it back unchanged. nil in a record written
	// before summaries were kept.
	summaries []byte
	// trace is the span context of the procedure's first span (see
	// entry.traceCtx), persisted as a W3C traceparent's fields in binary
	// (tracectx.AppendBinary); invalid with tracing off.
	trace trace.SpanContext
}

const (
	fID protowire.Number = iota + 1
	fParent
	fRoot
	fType
	fVersion
	fState
	fOwner
	fNonce
	fSubmitted
	fUpdated
	fDeadline
	fWaitUntil
	fStack
	fLocked
	fError
	fResult
	fData
	fAbort
	fPaused
	fBypass
	fRollingBack
	fRepeats
	fAckedAt
	fFinishedAt
	fSM
	fSMStarted
	fSMEOF
	fSMNext
	fSMHistory
	fSpins
	fErrorCode
	fRuns
)

// fHistory is numbered apart from the sequence above, so that fields added
// to it never collide with it.
const fHistory protowire.Number = 100

// Fields added later take numbers from 110 on, so that branches adding
// fields at the same time cannot collide.
const (
	fTrace protowire.Number = 110
	// fHistoryPacked is a finished root's history, packed
	// (appendPackedHistory) instead of one fHistory field per transition.
	fHistoryPacked protowire.Number = 111
	// fChildren lists a finished root's children, packed as id deltas.
	fChildren protowire.Number = 112
	// fChildSummaries is what a finished root keeps of its descendants,
	// whose records went with its finish (childsummary.go); older
	// binaries skip it.
	fChildSummaries protowire.Number = 113
	// fSubmitter is SubmitOptions.Submitter; older binaries skip it (and
	// drop it from a record they write again).
	fSubmitter protowire.Number = 114
)

// finishedRoot reports whether r is a finished root's record: the record
// the store keeps longest (ResultTTL) and the one that is never run again,
// so it is written compactly (see marshal).
func (r *record) finishedRoot() bool { return r.parent == 0 && r.state.Terminal() }

func (r *record) marshal() []byte {
	b := make([]byte, 0, 96+len(r.data)+len(r.result)+len(r.errMsg)+len(r.typeName)+len(r.historyEnc)+len(r.historyLast))
	u := func(n protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	i := func(n protowire.Number, v int64) { u(n, protowire.EncodeZigZag(v)) }
	flag := func(n protowire.Number, v bool) {
		if v {
			u(n, 1)
		}
	}
	str := func(n protowire.Number, v []byte) {
		if len(v) != 0 {
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendBytes(b, v)
		}
	}
	ints := func(n protowire.Number, vs []int32) {
		if len(vs) == 0 {
			return
		}
		var packed []byte
		for _, v := range vs {
			packed = protowire.AppendVarint(packed, protowire.EncodeZigZag(int64(v)))
		}
		str(n, packed)
	}
	u(fID, r.id)
	u(fParent, r.parent)
	u(fRoot, r.root)
	str(fType, []byte(r.typeName))
	u(fVersion, uint64(r.typeVersion))
	u(fState, uint64(r.state))
	str(fOwner, []byte(r.owner))
	str(fNonce, []byte(r.nonce))
	str(fSubmitter, []byte(r.submitter))
	// A finished root's record is kept for its result, on every master,
	// for ResultTTL: what it no longer needs in full is left out or
	// packed. Its last write is its finish (or its Ack), so Updated is
	// read back from those; its runs' times and its history are kept
	// relative to its submission (readers before this format see neither
	// times nor history, and everything else as before).
	compact := r.finishedRoot()
	i(fSubmitted, r.submitted)
	if d := r.updated - max(r.finishedAt, r.ackedAt); !compact || r.finishedAt == 0 || d < 0 || d >= int64(time.Millisecond) {
		i(fUpdated, r.updated)
	}
	i(fDeadline, r.deadline)
	i(fWaitUntil, r.waitUntil)
	ints(fStack, r.stack)
	flag(fLocked, r.locked)
	str(fError, []byte(r.errMsg))
	str(fErrorCode, []byte(r.errCode))
	str(fResult, r.result)
	str(fData, r.data)
	flag(fAbort, r.abort)
	flag(fPaused, r.paused)
	flag(fBypass, r.bypass)
	flag(fRollingBack, r.rollingBack)
	i(fRepeats, int64(r.repeats))
	i(fAckedAt, r.ackedAt)
	i(fFinishedAt, r.finishedAt)
	flag(fSM, r.sm)
	i(fSMNext, int64(r.smNext))
	if !compact {
		// What only runs or rolls back a state machine: a finished root
		// does neither again.
		flag(fSMStarted, r.smStarted)
		flag(fSMEOF, r.smEOF)
		ints(fSMHistory, r.smHistory)
		i(fSpins, int64(r.spins))
	}
	// A finished root starts no span again: its trace context, which only
	// the executor that resumes it needs, is left out.
	if r.trace.IsValid() && !compact {
		var tb [tracectx.BinaryLen]byte
		str(fTrace, tracectx.AppendBinary(tb[:0], r.trace))
	}
	if compact {
		submitted := fromUnixNano(r.submitted)
		for _, run := range r.runs {
			b = protowire.AppendTag(b, fRuns, protowire.BytesType)
			b = protowire.AppendBytes(b, marshalRunRelative(run, submitted))
		}
		if len(r.history) > 0 {
			node := ""
			if len(r.runs) > 0 {
				node = r.runs[0].Node
			}
			b = protowire.AppendTag(b, fHistoryPacked, protowire.BytesType)
			b = protowire.AppendBytes(b, appendPackedHistory(nil, r.history, node, submitted))
		}
		if len(r.children) > 0 {
			var packed []byte
			prev := r.id
			for _, c := range r.children {
				packed = protowire.AppendVarint(packed, protowire.EncodeZigZag(int64(c-prev)))
				prev = c
			}
			str(fChildren, packed)
		}
		str(fChildSummaries, r.summaries)
		return b
	}
	for _, run := range r.runs {
		b = protowire.AppendTag(b, fRuns, protowire.BytesType)
		b = protowire.AppendBytes(b, marshalRun(run))
	}
	b = append(b, r.historyEnc...)
	b = append(b, r.historyLast...)
	return b
}

// noteWrite counts one more write of r, by node at now, in its runs and
// history, as Executor.encodeWith does for a live procedure: for a
// finished root's record written again (an Ack).
func (r *record) noteWrite(node string, now time.Time) {
	r.updated = unixNano(now)
	r.runs = noteWrite(r.runs, node, now)
	submitted := fromUnixNano(r.submitted)
	h := loadedHistory(r.history, submitted)
	step := int32(-1)
	if r.sm {
		step = r.smNext
	}
	h.note(Transition{State: r.state, Step: step, Depth: int32(len(r.stack)), Node: node, At: now,
		Attempt: r.repeats, RollingBack: r.rollingBack}, submitted)
	r.history = h.list
	r.historyEnc, r.historyLast = h.encoded()
}

// walkFields calls varint and bytes for the varint and length-delimited
// fields of the protobuf message b, in order, and skips fields of other
// wire types (and of a kind whose function is nil): the one field loop of
// records, runs, transitions and summaries. what names the message in
// errors ("" for a record). bytes' values alias b.
func walkFields(b []byte, what string, varint func(num protowire.Number, v uint64), bytes func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %sbad tag: %v", ErrCorrupt, what, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && varint != nil:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("%w: %sfield %d: %v", ErrCorrupt, what, num, protowire.ParseError(n))
			}
			b = b[n:]
			varint(num, v)
		case typ == protowire.BytesType && bytes != nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("%w: %sfield %d: %v", ErrCorrupt, what, num, protowire.ParseError(n))
			}
			b = b[n:]
			if err := bytes(num, v); err != nil {
				return err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: %sfield %d: %v", ErrCorrupt, what, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

func (r *record) unmarshal(b []byte) error {
	*r = record{}
	if err := walkFields(b, "", r.setVarint, r.setBytes); err != nil {
		return err
	}
	if r.id == 0 {
		return fmt.Errorf("%w: record without id", ErrCorrupt)
	}
	if r.root == 0 {
		return fmt.Errorf("%w: record %d without root", ErrCorrupt, r.id)
	}
	submitted := fromUnixNano(r.submitted)
	for _, raw := range r.runsRaw {
		r.runs = append(r.runs, raw.resolve(submitted))
	}
	r.runsRaw = nil
	if r.updated == 0 && r.finishedAt != 0 {
		r.updated = max(r.finishedAt, r.ackedAt) // left out of a finished root's record
	}
	if r.historyPacked != nil {
		node := ""
		if len(r.runs) > 0 {
			node = r.runs[0].Node
		}
		h, err := unpackHistory(r.historyPacked, node, submitted)
		if err != nil {
			return err
		}
		r.history, r.historyPacked = h, nil
	}
	for prev, v := r.id, r.childrenPacked; len(v) > 0; {
		d, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return fmt.Errorf("%w: children: %v", ErrCorrupt, protowire.ParseError(n))
		}
		v = v[n:]
		prev += uint64(protowire.DecodeZigZag(d))
		r.children = append(r.children, prev)
	}
	r.childrenPacked = nil
	node := ""
	for _, raw := range r.historyRaw {
		tr, err := unmarshalTransition(raw, node, submitted)
		if err != nil {
			return err
		}
		r.history = append(r.history, tr)
		node = tr.Node
	}
	r.historyRaw = nil
	return nil
}

// setVarint is one case a field number, deliberately not a table: the
// record format is frozen since 0.1.0, and each case shows what a number
// decodes to.
func (r *record) setVarint(num protowire.Number, v uint64) {
	z := protowire.DecodeZigZag(v)
	switch num {
	case fID:
		r.id = v
	case fParent:
		r.parent = v
	case fRoot:
		r.root = v
	case fVersion:
		r.typeVersion = int(v)
	case fState:
		r.state = State(v)
	case fSubmitted:
		r.submitted = z
	case fUpdated:
		r.updated = z
	case fDeadline:
		r.deadline = z
	case fWaitUntil:
		r.waitUntil = z
	case fLocked:
		r.locked = v != 0
	case fAbort:
		r.abort = v != 0
	case fPaused:
		r.paused = v != 0
	case fBypass:
		r.bypass = v != 0
	case fRollingBack:
		r.rollingBack = v != 0
	case fRepeats:
		r.repeats = int32(z)
	case fSpins:
		r.spins = int32(z)
	case fAckedAt:
		r.ackedAt = z
	case fFinishedAt:
		r.finishedAt = z
	case fSM:
		r.sm = v != 0
	case fSMStarted:
		r.smStarted = v != 0
	case fSMEOF:
		r.smEOF = v != 0
	case fSMNext:
		r.smNext = int32(z)
	}
}

func (r *record) setBytes(num protowire.Number, v []byte) error {
	switch num {
	case fType:
		r.typeName = string(v)
	case fOwner:
		r.owner = string(v)
	case fNonce:
		r.nonce = string(v)
	case fSubmitter:
		r.submitter = string(v)
	case fError:
		r.errMsg = string(v)
	case fErrorCode:
		r.errCode = string(v)
	case fTrace:
		r.trace = tracectx.ParseBinary(v)
	case fResult:
		r.result = append([]byte(nil), v...)
	case fData:
		r.data = append([]byte(nil), v...)
	case fRuns:
		run, err := unmarshalRun(v)
		if err != nil {
			return err
		}
		r.runsRaw = append(r.runsRaw, run)
	case fHistory:
		r.historyRaw = append(r.historyRaw, v)
	case fHistoryPacked:
		r.historyPacked = v
	case fChildren:
		r.childrenPacked = v
	case fChildSummaries:
		r.summaries = append([]byte{}, v...)
	case fStack, fSMHistory:
		var out []int32
		for len(v) > 0 {
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return fmt.Errorf("%w: packed field %d: %v", ErrCorrupt, num, protowire.ParseError(n))
			}
			v = v[n:]
			out = append(out, int32(protowire.DecodeZigZag(x)))
		}
		if num == fStack {
			r.stack = out
		} else {
			r.smHistory = out
		}
	}
	return nil
}
