package procedure

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Transition is one stretch of a procedure's persisted writes that left it
// at one place: the same framework State, the same step (Depth executed
// steps on its rollback stack, and for a state machine the same next
// state), written by the same node, rolling forward or back. Each step
// that persists its outcome starts a new Transition; writes that change
// nothing of this (an abort request, a pause, a repeated suspension) are
// counted in the current one. Together with Runs it answers "which master
// ran which step, when, for how long and with how many retries".
type Transition struct {
	State State
	// Step is the state a state machine runs next, -1 for a Stepper.
	Step int32
	// Depth is how many executed steps the procedure had pushed on its
	// rollback stack (it shrinks while rolling back).
	Depth int32
	Node  string
	// At is the first write of the transition, Until its last.
	At, Until time.Time
	// Writes counts the persisted writes the transition spans.
	Writes uint32
	// Attempt is how many times in a row the step had run when the
	// transition was written: above 1, the step was retried.
	Attempt     int32
	RollingBack bool
}

// maxHistory bounds a procedure's History. A longer one keeps its first
// transition (the submission) and the latest ones, so a procedure of a
// million steps costs a bounded record, a couple of kilobytes per write at
// most. Trimming drops a quarter at once, so that it happens once every
// maxHistory/4 transitions rather than at every step.
const maxHistory = 64

// history is an entry's timeline and its encoding, kept incrementally:
// every write of the procedure carries the whole history, and encoding it
// anew at each step would make a step's cost grow with its procedure's
// length.
//
// list is never changed in place where a snapshot may see it: a new
// transition is appended (beyond every snapshot's length, which Info caps),
// while extending the last one or trimming builds a new slice. enc holds
// the encoding of list but its last transition (which a later write may
// still extend); it too only grows by appending, or is replaced whole, so
// a record may keep a view of it without copying.
type history struct {
	list []Transition
	// enc encodes list but its last transition, last encodes that one:
	// each write encodes one transition, the one it changed or started.
	enc, last []byte
}

// note records a write of the procedure (see Transition): it extends the
// last transition when the write left the procedure where it was, else
// starts a new one.
func (h *history) note(tr Transition, submitted time.Time) {
	tr.At = tr.At.Round(0) // wall time only, as it reads back from the record
	tr.Until, tr.Writes = tr.At, 1
	k := len(h.list)
	if k > 0 {
		last := h.list[k-1]
		if last.State == tr.State && last.Step == tr.Step && last.Depth == tr.Depth &&
			last.Node == tr.Node && last.RollingBack == tr.RollingBack {
			last.Until = tr.At
			last.Writes++
			last.Attempt = max(last.Attempt, tr.Attempt)
			h.list = append(h.list[:k-1:k-1], last)
			h.last = appendTransition(nil, last, prevNode(h.list, k-1), submitted)
			return
		}
		h.enc = append(h.enc, h.last...)
	} else {
		// Most procedures take a handful of steps: one allocation each.
		h.list = make([]Transition, 0, 4)
		h.enc = make([]byte, 0, 4*24)
	}
	h.list = append(h.list, tr)
	if len(h.list) > maxHistory {
		keep := maxHistory * 3 / 4
		list := make([]Transition, 0, maxHistory+1)
		list = append(list, h.list[0])
		list = append(list, h.list[len(h.list)-keep+1:]...)
		h.list = list
		h.enc = encodeAll(list, submitted)
	}
	k = len(h.list) - 1
	h.last = appendTransition(nil, h.list[k], prevNode(h.list, k), submitted)
}

// snapshot returns the transitions, for an Info: a view the history never
// changes, capped so that its holder's appends cannot reach the history.
func (h *history) snapshot() []Transition {
	if len(h.list) == 0 {
		return nil
	}
	return h.list[:len(h.list):len(h.list)]
}

// encoded returns the history's encoding as the record's fields: a view of
// every transition but the last, and the last one.
func (h *history) encoded() (done, last []byte) {
	return h.enc[:len(h.enc):len(h.enc)], h.last
}

// loadedHistory rebuilds the history of a record read back.
func loadedHistory(list []Transition, submitted time.Time) history {
	h := history{list: list, enc: encodeAll(list, submitted)}
	if k := len(list) - 1; k >= 0 {
		h.last = appendTransition(nil, list[k], prevNode(list, k), submitted)
	}
	return h
}

// noteTransition is history.note on a bare list, for tests.
func noteTransition(list []Transition, tr Transition) []Transition {
	h := history{list: list}
	h.note(tr, time.Time{})
	return h.list
}

// appendTransition appends tr as a record field; prevNode is the node of
// the transition before it.
func appendTransition(b []byte, tr Transition, prevNode string, submitted time.Time) []byte {
	// Encoded on the stack first: its length precedes it.
	var buf [96]byte
	b = protowire.AppendTag(b, fHistory, protowire.BytesType)
	return protowire.AppendBytes(b, marshalTransition(buf[:0], tr, prevNode, submitted))
}

// prevNode is the node of list[i-1], "" for the first.
func prevNode(list []Transition, i int) string {
	if i == 0 {
		return ""
	}
	return list[i-1].Node
}

// encodeAll encodes every transition of list but the last.
func encodeAll(list []Transition, submitted time.Time) []byte {
	var b []byte
	for i := 0; i < len(list)-1; i++ {
		b = appendTransition(b, list[i], prevNode(list, i), submitted)
	}
	return b
}

// Field numbers of a Transition inside the record. The history rides
// along with every write of its procedure, so each entry is kept to a few
// bytes: times in milliseconds (At after the submission, Until after At),
// Writes less one, and the node only where it differs from the entry
// before's; what is zero is left out.
const (
	fTrState protowire.Number = iota + 1
	fTrStep
	fTrDepth
	fTrNode
	fTrAtMs
	fTrSpanMs
	fTrMoreWrites
	fTrAttempt
	fTrRollingBack
)

// marshalTransition appends tr's encoding to b; prevNode is the node of the
// transition before it ("" for the first).
func marshalTransition(b []byte, tr Transition, prevNode string, submitted time.Time) []byte {
	b = appendVarint(b, fTrState, uint64(tr.State))
	// Step is stored plus one, so a Stepper's -1 costs nothing.
	b = appendVarint(b, fTrStep, protowire.EncodeZigZag(int64(tr.Step)+1))
	b = appendVarint(b, fTrDepth, protowire.EncodeZigZag(int64(tr.Depth)))
	if tr.Node != prevNode {
		b = protowire.AppendTag(b, fTrNode, protowire.BytesType)
		b = protowire.AppendString(b, tr.Node)
	}
	if !submitted.IsZero() && !tr.At.IsZero() {
		b = appendVarint(b, fTrAtMs, protowire.EncodeZigZag(tr.At.Sub(submitted).Milliseconds()))
	}
	b = appendVarint(b, fTrSpanMs, protowire.EncodeZigZag(tr.Until.Sub(tr.At).Milliseconds()))
	if tr.Writes > 1 {
		b = appendVarint(b, fTrMoreWrites, uint64(tr.Writes-1))
	}
	b = appendVarint(b, fTrAttempt, protowire.EncodeZigZag(int64(tr.Attempt)))
	if tr.RollingBack {
		b = appendVarint(b, fTrRollingBack, 1)
	}
	return b
}

// appendVarint appends field n = v, unless v is 0.
func appendVarint(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func unmarshalTransition(b []byte, prevNode string, submitted time.Time) (Transition, error) {
	tr := Transition{Step: -1, Node: prevNode, Writes: 1}
	var atMs, spanMs int64
	err := walkFields(b, "transition ", func(num protowire.Number, v uint64) {
		z := protowire.DecodeZigZag(v)
		switch num {
		case fTrState:
			tr.State = State(v)
		case fTrStep:
			tr.Step = int32(z) - 1
		case fTrDepth:
			tr.Depth = int32(z)
		case fTrAtMs:
			atMs = z
		case fTrSpanMs:
			spanMs = z
		case fTrMoreWrites:
			tr.Writes = uint32(v) + 1
		case fTrAttempt:
			tr.Attempt = int32(z)
		case fTrRollingBack:
			tr.RollingBack = v != 0
		}
	}, func(num protowire.Number, v []byte) error {
		if num == fTrNode {
			tr.Node = string(v)
		}
		return nil
	})
	if err != nil {
		return Transition{}, err
	}
	if !submitted.IsZero() {
		tr.At = submitted.Add(time.Duration(atMs) * time.Millisecond)
		tr.Until = tr.At.Add(time.Duration(spanMs) * time.Millisecond)
	}
	return tr, nil
}

// appendPackedHistory appends list packed, as a finished root's record
// keeps it: a transition that moved one step on is two bytes (head and
// time), instead of a field of fields of 7 to 15.
//
//	head   state | rolling back<<3 | depth<<4 | more<<6, where depth is
//	       0: as the transition before's, 1: one more, 2: one less, 3: given
//	at     zigzag milliseconds after the transition before's At (the submission before the first)
//	more   if head says so: flags, then what they name, in this order:
//	       depth (head's 3)  zigzag, after the transition before's
//	       1 node            length-prefixed (the transition before's, else node, is assumed)
//	       2 step            zigzag, after the transition before's (-1 before the first)
//	       4 span            zigzag milliseconds from At to Until (0 assumed)
//	       8 writes, attempt writes less one, then attempt zigzag (1 and 0 assumed)
//
// Times are kept in whole milliseconds after the submission, as fHistory
// keeps them.
func appendPackedHistory(b []byte, list []Transition, node string, submitted time.Time) []byte {
	depth, step, atMs := int32(0), int32(-1), int64(0)
	for _, tr := range list {
		at := int64(0)
		if !submitted.IsZero() && !tr.At.IsZero() {
			at = tr.At.Sub(submitted).Milliseconds()
		}
		span := tr.Until.Sub(tr.At).Milliseconds()
		head := uint64(tr.State) & 7
		if tr.RollingBack {
			head |= 1 << 3
		}
		var code uint64
		switch tr.Depth - depth {
		case 0:
		case 1:
			code = 1
		case -1:
			code = 2
		default:
			code = 3
		}
		head |= code << 4
		var more uint64
		if tr.Node != node {
			more |= 1
		}
		if tr.Step != step {
			more |= 2
		}
		if span != 0 {
			more |= 4
		}
		if tr.Writes > 1 || tr.Attempt != 0 {
			more |= 8
		}
		if more != 0 || code == 3 {
			head |= 1 << 6
		}
		b = protowire.AppendVarint(b, head)
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(at-atMs))
		if head&(1<<6) != 0 {
			b = protowire.AppendVarint(b, more)
		}
		if code == 3 {
			b = protowire.AppendVarint(b, protowire.EncodeZigZag(int64(tr.Depth-depth)))
		}
		if more&1 != 0 {
			b = protowire.AppendString(b, tr.Node)
		}
		if more&2 != 0 {
			b = protowire.AppendVarint(b, protowire.EncodeZigZag(int64(tr.Step-step)))
		}
		if more&4 != 0 {
			b = protowire.AppendVarint(b, protowire.EncodeZigZag(span))
		}
		if more&8 != 0 {
			b = protowire.AppendVarint(b, uint64(max(tr.Writes, 1)-1))
			b = protowire.AppendVarint(b, protowire.EncodeZigZag(int64(tr.Attempt)))
		}
		depth, step, atMs, node = tr.Depth, tr.Step, at, tr.Node
	}
	return b
}

// unpackHistory decodes appendPackedHistory's encoding.
func unpackHistory(b []byte, node string, submitted time.Time) ([]Transition, error) {
	var list []Transition
	depth, step, atMs := int32(0), int32(-1), int64(0)
	var err error
	varint := func(what string) uint64 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			if err == nil {
				err = fmt.Errorf("%w: packed history: bad %s", ErrCorrupt, what)
			}
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	for len(b) > 0 && err == nil {
		head := varint("head")
		atMs += protowire.DecodeZigZag(varint("time"))
		tr := Transition{State: State(head & 7), RollingBack: head&(1<<3) != 0, Writes: 1}
		var more uint64
		if head&(1<<6) != 0 {
			more = varint("flags")
		}
		switch (head >> 4) & 3 {
		case 1:
			depth++
		case 2:
			depth--
		case 3:
			depth += int32(protowire.DecodeZigZag(varint("depth")))
		}
		if more&1 != 0 {
			s, n := protowire.ConsumeString(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: packed history: bad node", ErrCorrupt)
			}
			node, b = s, b[n:]
		}
		if more&2 != 0 {
			step += int32(protowire.DecodeZigZag(varint("step")))
		}
		var span int64
		if more&4 != 0 {
			span = protowire.DecodeZigZag(varint("span"))
		}
		if more&8 != 0 {
			tr.Writes = uint32(varint("writes")) + 1
			tr.Attempt = int32(protowire.DecodeZigZag(varint("attempt")))
		}
		tr.Depth, tr.Node, tr.Step = depth, node, step
		if !submitted.IsZero() {
			tr.At = submitted.Add(time.Duration(atMs) * time.Millisecond)
			tr.Until = tr.At.Add(time.Duration(span) * time.Millisecond)
		}
		list = append(list, tr)
	}
	if err != nil {
		return nil, err
	}
	return list, nil
}
