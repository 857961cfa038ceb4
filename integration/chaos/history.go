package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/internal/enumname"
)

// The namespace model: one boolean per namespace (does it exist?), so a
// history is checked key by key (porcupine's partitioning), and a list
// becomes one read per key, each with the list's call and return times.

// OpKind is what a namespace operation does.
type OpKind int

// The namespace operations.
const (
	OpCreate OpKind = iota
	OpDelete
	OpRead
)

var opKindNames = []string{OpCreate: "create", OpDelete: "delete", OpRead: "read"}

func (k OpKind) String() string { return enumname.Format(k, opKindNames, "op%d") }

// Outcome is how a create or delete ended.
type Outcome int

// Outcomes. Unknown: the call may or may not have taken effect (timeout,
// UNAVAILABLE, a procedure never seen terminal).
const (
	Unknown Outcome = iota
	Done            // the create or delete took effect
	NoOp            // create: it existed already; delete: it did not exist
)

var outcomeNames = []string{Done: "ok", NoOp: "noop"}

func (o Outcome) String() string {
	if name, ok := enumname.Lookup(o, outcomeNames); ok {
		return name
	}
	return "unknown"
}

// nsInput and nsOutput are the porcupine input and output of one per-key
// operation.
type nsInput struct {
	Key  string
	Kind OpKind
}

type nsOutput struct {
	Outcome Outcome // creates and deletes
	Present bool    // reads
}

// NamespaceModel is the porcupine model of namespaces: per key, absent
// (the initial state) or present.
var NamespaceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(nsInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		present := state.(bool)
		in, out := input.(nsInput), output.(nsOutput)
		switch in.Kind {
		case OpCreate:
			switch out.Outcome {
			case Done:
				return !present, true
			case NoOp:
				return present, present
			}
			return true, true // applied or not, it exists afterwards
		case OpDelete:
			switch out.Outcome {
			case Done:
				return present, false
			case NoOp:
				return !present, present
			}
			return true, false
		default:
			return out.Present == present, present
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(nsInput), output.(nsOutput)
		if in.Kind == OpRead {
			return fmt.Sprintf("list has %s: %v", in.Key, out.Present)
		}
		return fmt.Sprintf("%s %s -> %s", in.Kind, in.Key, out.Outcome)
	},
	DescribeOperationMetadata: func(info any) string {
		if v, _ := info.(string); v != "" {
			return "answered by " + v
		}
		return ""
	},
	DescribeState: func(state any) string {
		if state.(bool) {
			return "present"
		}
		return "absent"
	},
}

// History records the namespace operations of concurrent clients, in
// monotonic time since its start.
type History struct {
	start time.Time
	keys  []string

	mu      sync.Mutex
	ops     []porcupine.Operation
	clients int
	counts  map[string]int // "create ok", "read failed", ...
}

// NewHistory starts an empty history of operations on keys (a list is
// recorded as one read of each).
func NewHistory(keys []string) *History {
	return &History{start: time.Now(), keys: slices.Clone(keys), counts: map[string]int{}}
}

// Now returns the time to record as an operation's call or return.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// NewClient returns a fresh client id. A client whose operation's outcome
// is unknown takes a new id for its next one: the old operation stays
// open until the end of the history, and porcupine expects one client's
// operations not to overlap.
func (h *History) NewClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	return h.clients - 1
}

// endOfHistory stands for "has not returned by the end of the history":
// Ops replaces it by a time after every recorded one.
const endOfHistory = -1

// Write records a create or delete. An Unknown outcome is recorded as
// returning at the end of the history (porcupine's convention for an
// operation that may or may not have happened).
func (h *History) Write(client int, kind OpKind, key string, call, ret int64, out Outcome) {
	h.WriteVia(client, kind, key, call, ret, out, "")
}

// WriteVia is Write noting which node answered (shown in the
// visualization and in the stale-read samples).
func (h *History) WriteVia(client int, kind OpKind, key string, call, ret int64, out Outcome, via string) {
	if out == Unknown {
		ret = endOfHistory
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[kind.String()+" "+out.String()]++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: nsInput{Key: key, Kind: kind}, Call: call, Output: nsOutput{Outcome: out}, Return: ret, Metadata: via})
}

// List records a list that answered names: one read of each key.
func (h *History) List(client int, call, ret int64, names []string) {
	h.ListVia(client, call, ret, names, "")
}

// ListVia is List noting which node answered.
func (h *History) ListVia(client int, call, ret int64, names []string, via string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts["read ok"]++
	for _, k := range h.keys {
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: nsInput{Key: k, Kind: OpRead}, Call: call, Output: nsOutput{Present: slices.Contains(names, k)}, Return: ret, Metadata: via})
	}
}

// Failed counts an operation that failed for sure without effect (a list
// that got no answer): it is left out of the history.
func (h *History) Failed(kind OpKind) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[kind.String()+" failed"]++
}

// Detail returns the count of each kind of operation and outcome, e.g.
// "create ok 12, create noop 30, ...".
func (h *History) Detail() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for k, n := range h.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Counts returns how many operations ended each way: ok, failed (no
// effect), unknown (possibly applied); a create that found the namespace
// or a delete that did not is ok (it answered).
func (h *History) Counts() (ok, failed, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, n := range h.counts {
		switch {
		case strings.HasSuffix(k, " unknown"):
			unknown += n
		case strings.HasSuffix(k, " failed"):
			failed += n
		default:
			ok += n
		}
	}
	return ok, failed, unknown
}

// Ops returns the recorded per-key operations, with every open one
// returning after everything else.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var end int64
	for _, op := range h.ops {
		end = max(end, op.Call, op.Return)
	}
	out := slices.Clone(h.ops)
	for i := range out {
		if out[i].Return == endOfHistory {
			out[i].Return = end + 1
		}
	}
	return out
}

// CheckResult is the verdict on a history.
type CheckResult struct {
	Result porcupine.CheckResult
	Ops    int // per-key operations checked
	// Stale counts reads that no linearization can explain by a simple
	// argument (see StaleReads); nonzero means Result is Illegal.
	Stale   int
	Samples []string // a few of them, described
	// Visualizations are the paths of porcupine's HTML renderings of the
	// namespaces whose history is not linearizable.
	Visualizations []string
}

// Check runs porcupine on the history, namespace by namespace (each given
// up after timeout: porcupine.Unknown), and writes the visualization of
// each namespace whose history is not linearizable into dir: one page
// each, since a page of the whole history would be large and mostly
// beside the point.
func (h *History) Check(timeout time.Duration, dir, name string) (CheckResult, error) {
	ops := h.Ops()
	stale, samples := StaleReads(ops)
	cr := CheckResult{Result: porcupine.Ok, Ops: len(ops), Stale: stale, Samples: samples}
	single := NamespaceModel
	single.Partition = nil
	for _, kops := range NamespaceModel.Partition(ops) {
		r, info := porcupine.CheckOperationsVerbose(single, kops, timeout)
		switch {
		case r == porcupine.Illegal:
			cr.Result = porcupine.Illegal
		case r == porcupine.Unknown && cr.Result == porcupine.Ok:
			cr.Result = porcupine.Unknown
		}
		if r != porcupine.Illegal {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return cr, fmt.Errorf("chaos: artifacts: %w", err)
		}
		path := filepath.Join(dir, name+"-"+kops[0].Input.(nsInput).Key+".html")
		if err := porcupine.VisualizePath(single, info, path); err != nil {
			return cr, fmt.Errorf("chaos: write visualization: %w", err)
		}
		cr.Visualizations = append(cr.Visualizations, path)
	}
	return cr, nil
}

// StaleReads counts the reads that must be wrong, by an argument simple
// enough to state in a report: a create or delete w of key k returned
// (took effect) before read r was called, and no other create or delete
// of k that may have taken effect (done or unknown) could fall between w
// and r (it was called before r returned and returned after w was
// called). Then every linearization puts w last before r, and r must see
// w's state; if it does not, r is stale. Porcupine finds these and more.
func StaleReads(ops []porcupine.Operation) (n int, samples []string) {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		k := op.Input.(nsInput).Key
		byKey[k] = append(byKey[k], op)
	}
	for key, kops := range byKey {
		var writes, reads []porcupine.Operation
		for _, op := range kops {
			in, out := op.Input.(nsInput), op.Output.(nsOutput)
			switch {
			case in.Kind == OpRead:
				reads = append(reads, op)
			case out.Outcome != NoOp:
				writes = append(writes, op)
			}
		}
		for _, r := range reads {
			for i, w := range writes {
				if w.Output.(nsOutput).Outcome != Done || w.Return >= r.Call {
					continue
				}
				between := false
				for j, o := range writes {
					if j != i && o.Call < r.Return && o.Return > w.Call {
						between = true
						break
					}
				}
				if between {
					continue
				}
				want := w.Input.(nsInput).Kind == OpCreate
				if r.Output.(nsOutput).Present != want {
					n++
					if len(samples) < 5 {
						samples = append(samples, fmt.Sprintf("read of %s at %v..%v%s saw present=%v, but %s (returned %v%s) left it present=%v",
							key, time.Duration(r.Call).Round(time.Microsecond), time.Duration(r.Return).Round(time.Microsecond), via(r),
							!want, w.Input.(nsInput).Kind, time.Duration(w.Return).Round(time.Microsecond), via(w), want))
					}
				}
				break // one decisive write is enough
			}
		}
	}
	return n, samples
}

func via(op porcupine.Operation) string {
	if v, _ := op.Metadata.(string); v != "" {
		return " via " + v
	}
	return ""
}
