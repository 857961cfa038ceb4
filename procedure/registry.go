package procedure

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/baton-dev/baton/internal/version"
)

// Registry maps procedure type names to factories, so persisted procedures
// can be decoded. A type is registered once, with its current version.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]*typeInfo
	byType map[reflect.Type]*typeInfo
}

type typeInfo struct {
	name    string
	version int
	// since[v] is the format level from which state version v may be
	// written (TypeOptions.Since), for v in 1..version; nil when every
	// version is written at every level.
	since   []version.Format
	factory func() Procedure
	// Span names of its steps and rollback steps, made once rather than
	// at every traced step.
	stepSpan, rollbackSpan string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: make(map[string]*typeInfo), byType: make(map[reflect.Type]*typeInfo)}
}

// Register adds a procedure type. version is the version of the state this
// binary writes (≥ 1), at every cluster version (RegisterWith writes a
// newer one only once the cluster version allows it); the type must be
// able to decode every older version
// (see the package doc). factory returns a new, empty procedure, always of
// the same Go type, which must be a pointer so state can be decoded into it.
func (r *Registry) Register(name string, version int, factory func() Procedure) error {
	return r.RegisterWith(name, TypeOptions{Version: version}, factory)
}

// TypeOptions is how a type is registered (RegisterWith).
type TypeOptions struct {
	// Version is the newest version of the state this binary reads and
	// writes (≥ 1), Register's version.
	Version int
	// Since maps a state version above 1 to the format level that
	// introduced it: while the cluster version (Config.RecordFormat) is
	// below that level, so that a member of an older release may load
	// the procedure, the executor writes the newest version the cluster
	// version allows instead, through the type's StateDowngrader. A
	// version not listed takes the level of the version before it (a
	// change every older version's binary reads needs no entry); levels
	// may not go down as versions go up. Empty: Version is written at
	// every level, as Register does.
	Since map[int]version.Format
}

// RegisterWith is Register with options: a type whose newer state an
// older release cannot read says from which format level each version
// may be written (TypeOptions.Since), and implements StateDowngrader to
// write the older shape until then. See "Versions" in the package doc.
func (r *Registry) RegisterWith(name string, opts TypeOptions, factory func() Procedure) error {
	version := opts.Version
	if name == "" {
		return fmt.Errorf("%w: empty type name", ErrInvalid)
	}
	if version < 1 {
		return fmt.Errorf("%w: type %q: version %d, want >= 1", ErrInvalid, name, version)
	}
	if factory == nil {
		return fmt.Errorf("%w: type %q: nil factory", ErrInvalid, name)
	}
	sample := factory()
	if sample == nil {
		return fmt.Errorf("%w: type %q: factory returned nil", ErrInvalid, name)
	}
	t := reflect.TypeOf(sample)
	if t.Kind() != reflect.Pointer {
		return fmt.Errorf("%w: type %q: factory returns %v, want a pointer", ErrInvalid, name, t)
	}
	if err := checkRunnable(sample); err != nil {
		return fmt.Errorf("%w: type %q: %v", ErrInvalid, name, err)
	}
	since, err := sinceLevels(version, opts.Since)
	if err != nil {
		return fmt.Errorf("%w: type %q: %v", ErrInvalid, name, err)
	}
	if _, ok := sample.(StateDowngrader); since != nil && !ok {
		return fmt.Errorf("%w: type %q: version %d is written only from %v, but %T is no StateDowngrader to write version %d before",
			ErrInvalid, name, version, since[version], sample, version-1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byName[name]; dup {
		return fmt.Errorf("%w: type %q registered twice", ErrInvalid, name)
	}
	if other, dup := r.byType[t]; dup {
		return fmt.Errorf("%w: Go type %v already registered as %q", ErrInvalid, t, other.name)
	}
	if len(r.byName) >= maxTypes {
		return fmt.Errorf("%w: type %q: a registry holds at most %d types", ErrInvalid, name, maxTypes)
	}
	ti := &typeInfo{name: name, version: version, since: since, factory: factory, stepSpan: name + " step", rollbackSpan: name + " rollback"}
	r.byName[name] = ti
	r.byType[t] = ti
	return nil
}

// sinceLevels is TypeOptions.Since as typeInfo.since: the level of
// each version 1..current, nil when every one is written at level 1.
// maxGatedVersion bounds the version of a type registered with Since
// levels: sinceLevels keeps a level for each version up to it.
const maxGatedVersion = 1 << 16

func sinceLevels(current int, since map[int]version.Format) ([]version.Format, error) {
	gatedAny := false
	for v, f := range since {
		if v < 2 || v > current {
			return nil, fmt.Errorf("Since names version %d, want 2..%d (version 1 is written at every level)", v, current)
		}
		if f < version.Format1 {
			return nil, fmt.Errorf("version %d from %v, before version 1 (%v)", v, f, version.Format1)
		}
		gatedAny = gatedAny || f > version.Format1
	}
	if !gatedAny {
		// Every version at every level, as Register has always done: no
		// table, whatever the version's number (some count by date).
		return nil, nil
	}
	if current > maxGatedVersion {
		return nil, fmt.Errorf("version %d: a type with Since levels counts its versions up to %d", current, maxGatedVersion)
	}
	out := make([]version.Format, current+1)
	out[1] = version.Format1
	gated := false
	for v := 2; v <= current; v++ {
		out[v] = out[v-1]
		if f, ok := since[v]; ok {
			if f < out[v-1] {
				return nil, fmt.Errorf("version %d from %v, before version %d (%v)", v, f, v-1, out[v-1])
			}
			out[v] = f
		}
		gated = gated || out[v] > version.Format1
	}
	for v := range since {
		if v < 2 || v > current {
			return nil, fmt.Errorf("Since names version %d, want 2..%d (version 1 is written at every level)", v, current)
		}
	}
	if !gated {
		return nil, nil
	}
	return out, nil
}

// writeVersion is the newest state version of ti that gate allows
// writing.
func (ti *typeInfo) writeVersion(gate version.Gate) int {
	v := ti.version
	if ti.since == nil {
		return v
	}
	for v > 1 && !gate.Allows(ti.since[v]) {
		v--
	}
	return v
}

// MustRegister is Register for program start-up: it panics on error.
func (r *Registry) MustRegister(name string, version int, factory func() Procedure) {
	if err := r.Register(name, version, factory); err != nil {
		panic(err)
	}
}

// Types lists the registered type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns a new, empty procedure of the named type.
func (r *Registry) New(name string) (Procedure, error) {
	r.mu.RLock()
	ti := r.byName[name]
	r.mu.RUnlock()
	if ti == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, name)
	}
	return ti.factory(), nil
}

func (r *Registry) lookupName(name string) *typeInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byName[name]
}

func (r *Registry) lookup(p Procedure) (*typeInfo, error) {
	r.mu.RLock()
	ti := r.byType[reflect.TypeOf(p)]
	r.mu.RUnlock()
	if ti == nil {
		return nil, fmt.Errorf("%w: Go type %T is not registered", ErrUnknownType, p)
	}
	return ti, nil
}

// DecodeState decodes a stored procedure (store.Proc.Data) into a new
// procedure of its registered type, as the executor does when it loads
// it: a record of a newer version than the registered one is refused,
// an older one goes through the type's StateUpgrader. decoded is false
// for a finished root, whose state the executor never decodes (it may
// have been written without it). For tests that read what an older
// release stored.
func (r *Registry) DecodeState(data []byte) (p Procedure, decoded bool, err error) {
	var rec record
	if err := rec.unmarshal(data); err != nil {
		return nil, false, err
	}
	_, p, err = r.decodeRecord(&rec)
	if err != nil {
		return nil, false, err
	}
	return p, !rec.finishedRoot(), nil
}

// decodeRecord is rec's registered type and its procedure, the state
// (and a state machine's position) decoded unless rec is a finished root.
func (r *Registry) decodeRecord(rec *record) (*typeInfo, Procedure, error) {
	ti := r.lookupName(rec.typeName)
	if ti == nil {
		return nil, nil, fmt.Errorf("%w: %q (register it to load this procedure)", ErrUnknownType, rec.typeName)
	}
	if rec.typeVersion > ti.version {
		return nil, nil, fmt.Errorf("%w: %q version %d was written by a newer binary (this one knows up to %d)",
			ErrUnknownType, rec.typeName, rec.typeVersion, ti.version)
	}
	if rec.state > Failed || rec.state == Initializing {
		return nil, nil, fmt.Errorf("%w: state %d", ErrCorrupt, rec.state)
	}
	p := ti.factory()
	if rec.finishedRoot() {
		// Never run or rolled back again, so never decoded: it is retired
		// at once (finished.go), and its state may have been written
		// without the type's state (Executor.unserialisable).
	} else if err := unmarshalState(p, max(rec.typeVersion, 1), ti.version, rec.data); err != nil {
		return nil, nil, fmt.Errorf("%w: decoding %s v%d state: %w", ErrCorrupt, rec.typeName, rec.typeVersion, err)
	}
	sm, isSM := p.(stateMachineProcedure)
	if isSM != rec.sm {
		return nil, nil, fmt.Errorf("%w: %s: persisted as state machine=%v, registered type is %v", ErrCorrupt, rec.typeName, rec.sm, isSM)
	}
	if isSM {
		m := sm.machine()
		m.started, m.eof, m.next, m.history = rec.smStarted, rec.smEOF, rec.smNext, rec.smHistory
	}
	return ti, p, nil
}

func checkRunnable(p Procedure) error {
	_, stepper := p.(Stepper)
	_, machine := p.(stateMachineProcedure)
	switch {
	case stepper && machine:
		return fmt.Errorf("%T is both a Stepper and a state machine; pick one", p)
	case !stepper && !machine:
		return fmt.Errorf("%T implements neither Stepper nor StateSteps with an embedded StateMachine", p)
	}
	return nil
}

// marshalStateAt serialises p's state as version v of its type (ti),
// through its StateDowngrader when v is older than ti's.
func marshalStateAt(p Procedure, ti *typeInfo, v int) ([]byte, error) {
	if v < ti.version {
		d, ok := p.(StateDowngrader)
		if !ok {
			return nil, fmt.Errorf("%T cannot write version %d of its state: no StateDowngrader", p, v)
		}
		return d.DowngradeState(v)
	}
	return marshalState(p)
}

func marshalState(p Procedure) ([]byte, error) {
	if m, ok := p.(StateMarshaler); ok {
		return m.MarshalState()
	}
	return json.Marshal(p)
}

// unmarshalState decodes state written by version of p's type, whose
// current version is current.
func unmarshalState(p Procedure, version, current int, data []byte) error {
	if u, ok := p.(StateUnmarshaler); ok {
		return u.UnmarshalState(version, data)
	}
	if len(data) == 0 {
		return nil
	}
	if up, ok := p.(StateUpgrader); ok && version < current {
		return up.UpgradeState(version, func(old any) error { return json.Unmarshal(data, old) })
	}
	return json.Unmarshal(data, p)
}
