package procedure

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/store"
)

// Failures a step can name so that callers need not parse its message:
// wrap one of these (or ErrNotFound) in the error a step returns, and the
// procedure's Info.ErrorCode says which. A precondition that fails rolls the
// procedure back like any other failure.
var (
	// ErrAlreadyExists: what the procedure would create exists.
	ErrAlreadyExists = errors.New("procedure: already exists")
	// ErrFailedPrecondition: the procedure's target is in a state that
	// forbids it (a table not disabled, a namespace not empty).
	ErrFailedPrecondition = errors.New("procedure: failed precondition")
)

// Values of Info.ErrorCode, spelled as the gRPC codes the admin API maps
// them to.
const (
	CodeAlreadyExists      = "ALREADY_EXISTS"
	CodeNotFound           = "NOT_FOUND"
	CodeFailedPrecondition = "FAILED_PRECONDITION"
)

// ErrorCode classifies a step's failure: CodeAlreadyExists, CodeNotFound or
// CodeFailedPrecondition when err wraps ErrAlreadyExists, ErrNotFound or
// ErrFailedPrecondition, "" otherwise.
func ErrorCode(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrAlreadyExists):
		return CodeAlreadyExists
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrFailedPrecondition):
		return CodeFailedPrecondition
	}
	return ""
}

// Errorf is an error of kind (ErrNotFound, ErrInvalid, ErrAlreadyExists,
// ...: errors.Is matches it, so ErrorCode and the API's codes classify it)
// whose message is the formatted text alone. A wrapped sentinel's text
// ("procedure: not found: ...") reads as this package's prefix in the
// message of whoever shows the error to a person, often beside a prefix
// of its own; a message said here is the one sentence they see. A %w in
// format is wrapped too.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{err: fmt.Errorf(format, args...), kind: kind}
}

// WithKind is err, matching kind as well for errors.Is, message unchanged.
func WithKind(kind, err error) error { return &kindError{err: err, kind: kind} }

type kindError struct {
	err  error
	kind error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// DecodeInfo decodes a persisted procedure (store.Proc.Data) into its Info
// without an executor or a registry: what a standby serves stale reads from.
// Children is empty but for a finished root, whose record lists the
// children it had (a live record names its parent, not its children; see
// StoredInfos).
func DecodeInfo(data []byte) (Info, error) {
	var r record
	if err := r.unmarshal(data); err != nil {
		return Info{}, err
	}
	return Info{
		ID: r.id, ParentID: r.parent, RootID: r.root, Type: r.typeName, Version: r.typeVersion,
		State: r.state, Owner: r.owner, Nonce: r.nonce, Submitter: r.submitter,
		Submitted: fromUnixNano(r.submitted), Updated: fromUnixNano(r.updated),
		Finished: fromUnixNano(r.finishedAt), Acked: fromUnixNano(r.ackedAt),
		Error: r.errMsg, ErrorCode: r.errCode, Result: r.result,
		Paused: r.paused, AbortRequested: r.abort, Bypassed: r.bypass, Locked: r.locked,
		StackDepth: len(r.stack), Runs: r.runs, History: r.history, RollingBack: r.rollingBack,
		Data: r.data, Children: r.children,
	}, nil
}

// StoredInfos returns the Info of every procedure procs holds (e.g.
// raftfsm.FSM.Procs), by ascending id, with Children filled in.
func StoredInfos(procs func(fn func(store.Proc) error) error) ([]Info, error) {
	var out []Info
	err := procs(func(p store.Proc) error {
		info, err := DecodeInfo(p.Data)
		if err != nil {
			return fmt.Errorf("procedure %d: %w", p.ID, err)
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	at := make(map[uint64]int, len(out))
	for i, info := range out {
		at[info.ID] = i
	}
	for _, info := range out {
		// A finished root's record lists its children already (those of a
		// crash before their delete are still stored too).
		if i, ok := at[info.ParentID]; ok && info.ParentID != 0 && !slices.Contains(out[i].Children, info.ID) {
			out[i].Children = append(out[i].Children, info.ID)
		}
	}
	return out, nil
}

// Match reports whether info passes f's filters (not its paging).
func (f Filter) Match(info Info) bool {
	if f.Type != "" && info.Type != f.Type || f.RootsOnly && info.ParentID != 0 || f.Owner != "" && info.Owner != f.Owner ||
		!f.submittedIn(info.Submitted) {
		return false
	}
	return f.matchState(info.State)
}

// MatchSummary is Match for a record's Summary.
func (f Filter) MatchSummary(s Summary) bool {
	if f.Type != "" && string(s.Type) != f.Type || f.RootsOnly && s.ParentID != 0 || f.Owner != "" && string(s.Owner) != f.Owner ||
		!f.submittedIn(s.Submitted) {
		return false
	}
	return f.matchState(s.State)
}

func (f Filter) matchState(st State) bool {
	if len(f.States) == 0 {
		return true
	}
	for _, s := range f.States {
		if s == st {
			return true
		}
	}
	return false
}

func (f Filter) submittedIn(t time.Time) bool {
	return (f.SubmittedAfter.IsZero() || !t.Before(f.SubmittedAfter)) &&
		(f.SubmittedBefore.IsZero() || t.Before(f.SubmittedBefore))
}

// Summary is what listings filter and count stored procedures by, read
// from a record without decoding the rest: Type and Owner alias the
// record's bytes (valid as long as they are, and not to be modified), so
// a pass over a hundred thousand records allocates nothing per record.
type Summary struct {
	ID, ParentID, RootID uint64
	Type, Owner          []byte
	State                State
	Submitted, Updated   time.Time
	// WaitUntil ends a timed suspension (zero: none).
	WaitUntil time.Time
	Paused    bool
	// Submitter aliases the record's bytes as Type and Owner do.
	Submitter []byte
}

// DecodeSummary reads a persisted procedure's Summary.
func DecodeSummary(data []byte) (Summary, error) {
	var s Summary
	var submitted, updated, waitUntil, finished, acked int64
	// A switch of its own, not record.unmarshal's: that one copies every
	// string, which a pass over every record must not pay.
	err := walkFields(data, "", func(num protowire.Number, v uint64) {
		switch num {
		case fID:
			s.ID = v
		case fParent:
			s.ParentID = v
		case fRoot:
			s.RootID = v
		case fState:
			s.State = State(v)
		case fSubmitted:
			submitted = protowire.DecodeZigZag(v)
		case fUpdated:
			updated = protowire.DecodeZigZag(v)
		case fWaitUntil:
			waitUntil = protowire.DecodeZigZag(v)
		case fFinishedAt:
			finished = protowire.DecodeZigZag(v)
		case fAckedAt:
			acked = protowire.DecodeZigZag(v)
		case fPaused:
			s.Paused = v != 0
		}
	}, func(num protowire.Number, v []byte) error {
		switch num {
		case fType:
			s.Type = v
		case fOwner:
			s.Owner = v
		case fSubmitter:
			s.Submitter = v
		}
		return nil
	})
	if err != nil {
		return Summary{}, err
	}
	if s.ID == 0 {
		return Summary{}, fmt.Errorf("%w: record without id", ErrCorrupt)
	}
	if updated == 0 && finished != 0 {
		updated = max(finished, acked) // left out of a finished root's record (record.marshal)
	}
	s.Submitted, s.Updated, s.WaitUntil = fromUnixNano(submitted), fromUnixNano(updated), fromUnixNano(waitUntil)
	return s, nil
}
