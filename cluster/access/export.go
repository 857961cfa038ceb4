package access

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// Export configures the export of the audit trail to a file: every
// master writes each record it applies, once final, as one JSON line
// (ExportLine), appending to Path, so that the evidence outlives the
// trail's pruning. The file is this master's copy: a record committed
// while it was down is written when it comes back, if the trail still
// holds it. Its last line says where to resume, so no record is written
// twice, and none skipped, across restarts.
type Export struct {
	// Path is the file written; rotated files are Path.1 (the newest) to
	// Path.<Keep>.
	Path string
	// MaxBytes rotates the file before a line would take it past this
	// size. Default 100 MiB.
	MaxBytes int64
	// Keep is how many rotated files are kept besides Path. Default 5.
	Keep int
}

// Defaults of Export.
const (
	DefaultExportMaxBytes = 100 << 20
	DefaultExportKeep     = 5
	// exportEvery is how often a master looks for records to export.
	exportEvery = 250 * time.Millisecond
	// exportGrace is how long a record may say PENDING before it is
	// exported as such: its outcome is normally written over it within
	// WriteTimeout; past that the leader that served it died first.
	exportGrace = 3 * WriteTimeout
)

// Validate reports a bad setting.
func (e Export) Validate() error {
	if e.Path == "" {
		return errors.New("admin: audit file: no path")
	}
	if e.MaxBytes < 0 || e.Keep < 0 {
		return errors.New("admin: audit file: negative size or count")
	}
	return nil
}

func (e Export) withDefaults() Export {
	if e.MaxBytes == 0 {
		e.MaxBytes = DefaultExportMaxBytes
	}
	if e.Keep == 0 {
		e.Keep = DefaultExportKeep
	}
	return e
}

// ExportLine is a record as the file has it: snake_case keys, numbers as
// numbers.
type ExportLine struct {
	ID              string   `json:"id"`
	AtUnixMs        int64    `json:"at_unix_ms"`
	CommittedUnixMs int64    `json:"committed_unix_ms"`
	Principal       string   `json:"principal"`
	Name            string   `json:"name,omitempty"`
	Method          string   `json:"method"`
	Args            string   `json:"args,omitempty"`
	ArgsDigest      string   `json:"args_digest,omitempty"`
	Code            string   `json:"code"`
	Message         string   `json:"message,omitempty"`
	ProcIDs         []uint64 `json:"proc_ids,omitempty"`
	Node            string   `json:"node"`
	Peer            string   `json:"peer,omitempty"`
	Via             string   `json:"via,omitempty"`
	Refused         bool     `json:"refused"`
	// ExportedBy is the master that wrote the line.
	ExportedBy string `json:"exported_by"`
}

func lineOf(r *adminpb.AuditRecord, by string) ExportLine {
	return ExportLine{ID: r.GetId(), AtUnixMs: r.GetAtUnixMs(), CommittedUnixMs: r.GetCommittedUnixMs(), Principal: r.GetPrincipal(),
		Name: r.GetName(), Method: r.GetMethod(), Args: r.GetArgs(), ArgsDigest: r.GetArgsDigest(), Code: r.GetCode(),
		Message: r.GetMessage(), ProcIDs: r.GetProcIds(), Node: r.GetNode(), Peer: r.GetPeer(), Via: r.GetVia(),
		Refused: r.GetRefused(), ExportedBy: by}
}

// Exporter appends the trail's records to the file, in the order of
// their ids: the order they first commit in (one audit entry in flight at
// a time; a later term's entries follow every earlier one that commits).
//
// It takes each record as this master applies it (raftfsm.PutObserver),
// so a record pruned by the next entry is exported all the same, and
// holds it in memory until it is final. The state is read only at start
// (what was applied before the exporter was there, a restart's catch-up),
// after a snapshot replaced it, and after the queue overflowed.
type Exporter struct {
	x   ExporterConfig
	cfg Export
	f   *os.File
	// size is f's size.
	size int64
	// rotateFailed: the last rotation failed, and f grows past MaxBytes
	// (said once in the log).
	rotateFailed bool
	// maxHeld bounds the bytes of the records held; past half of it a
	// PENDING record no longer holds back those after it.
	maxHeld int
	// overflows counts the times the queue filled (records let go of,
	// reread from the state).
	overflows prometheus.Counter

	mu sync.Mutex
	// after is the suffix (term-n) of the newest record written.
	after string
	// held are the records taken and not yet written, by suffix: each
	// one's newest version.
	held      map[string][]byte
	heldBytes int
	// gap: the records from this suffix on were let go of (the queue was
	// full) and are to be reread from the state; "" for none.
	gap string
	// rescan: read the state past after (at start, after a restore).
	rescan bool
	// observed: records arrive as applied; without, each export reads
	// the state.
	observed bool
	// late are the records written as PENDING, by suffix, with when: the
	// outcome, if it comes, is written as a line of its own.
	late map[string]time.Time
	// overflowing: the overflow was logged; cleared once caught up.
	overflowing bool
	wake        chan struct{}
}

// Bounds of the exporter's memory.
const (
	// exportMaxHeld is the default of Exporter.maxHeld.
	exportMaxHeld = 32 << 20
	// exportLateFor is how long an outcome is awaited for a record
	// written as PENDING.
	exportLateFor = 10 * time.Minute
)

// NewExporter is the export to the file cfg names of the trail of the
// master x describes, resuming after the file's last whole line.
func NewExporter(cfg Export, x ExporterConfig) (*Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Exporter{x: x, cfg: cfg.withDefaults(), maxHeld: exportMaxHeld, held: map[string][]byte{},
		late: map[string]time.Time{}, rescan: true, wake: make(chan struct{}, 1)}
	var err error
	if e.overflows, err = registerCounter(x.Metrics, prometheus.CounterOpts{Name: "baton_audit_file_overflows_total",
		Help: "Times the audit file's queue filled (the file's disk behind the trail) and its exporter reread the records past it from the trail: one pruned meanwhile is missing from the file."}); err != nil {
		return nil, err
	}
	after, err := lastExported(e.cfg.Path)
	if err != nil {
		return nil, err
	}
	if after == "" {
		if after, err = lastExported(e.cfg.Path + ".1"); err != nil {
			return nil, err
		}
	}
	e.after = after
	if err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

// registerCounter registers c with reg (if any), or takes the one
// registered under its name.
func registerCounter(reg prometheus.Registerer, opts prometheus.CounterOpts) (prometheus.Counter, error) {
	c := prometheus.NewCounter(opts)
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(prometheus.Counter); ok {
			return old, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("admin: audit file metrics: %w", err)
	}
	return c, nil
}

// lastExported is the suffix of the newest record on path's whole lines
// ("" for none): a later line may be an earlier record's outcome. A torn
// last line (a crash mid-write) is cut off.
func lastExported(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("admin: audit file: %w", err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i != len(b)-1 {
		if err := os.Truncate(path, int64(i+1)); err != nil {
			return "", fmt.Errorf("admin: audit file: cutting a torn last line: %w", err)
		}
		b = b[:i+1]
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	newest := ""
	for sc.Scan() {
		var l ExportLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.ID == "" {
			continue
		}
		key, ok := AuditKeyOf(l.ID)
		if !ok {
			return "", fmt.Errorf("admin: audit file %s: id %q is not a record id", path, l.ID)
		}
		newest = max(newest, strings.TrimPrefix(key, AuditPrefix))
	}
	if err := sc.Err(); err != nil {
		// Resuming from the lines read would write the rest again.
		return "", fmt.Errorf("admin: audit file %s: %w", path, err)
	}
	return newest, nil
}

func (e *Exporter) open() error {
	f, err := os.OpenFile(e.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("admin: audit file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("admin: audit file: %w", err)
	}
	e.f, e.size = f, st.Size()
	return nil
}

// rotate moves Path to Path.1 (and each Path.k to Path.k+1, dropping
// those past Keep) and opens a new Path.
func (e *Exporter) rotate() error {
	f := e.f
	e.f = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("admin: audit file: %w", err)
	}
	if err := e.shiftRotated(); err != nil {
		// Evidence matters more than the size bound: the file is opened
		// again and grows on, and the next record past the bound tries
		// again.
		return errors.Join(err, e.open())
	}
	return e.open()
}

// shiftRotated renames Path.k to Path.k+1 (the one past Keep is
// overwritten) and Path to Path.1.
func (e *Exporter) shiftRotated() error {
	for k := e.cfg.Keep - 1; k >= 1; k-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", e.cfg.Path, k), fmt.Sprintf("%s.%d", e.cfg.Path, k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("admin: audit file rotation: %w", err)
		}
	}
	if err := os.Rename(e.cfg.Path, e.cfg.Path+".1"); err != nil {
		return fmt.Errorf("admin: audit file rotation: %w", err)
	}
	return nil
}

// observe has the backend tell e of each record as it is applied, if it
// can; stop ends that.
func (e *Exporter) observe() (stop func()) {
	if e.x.Observe == nil {
		return func() {}
	}
	stop = e.x.Observe(&raftfsm.PutObserver{
		Prefixes: []string{AuditPrefix, RefusedPrefix},
		Put:      e.onPut,
		Restored: e.onRestored,
	})
	e.mu.Lock()
	e.observed, e.rescan = true, true // what was applied before is read from the state
	e.mu.Unlock()
	return stop
}

// onPut takes a record as the FSM applies it: it must not block.
func (e *Exporter) onPut(key string, value []byte) {
	recs := StoredRecords(suffixOf(key), value)
	if len(recs) == 0 {
		e.x.Log.Error("audit file: a group of records that does not decode is skipped", "key", key)
	}
	e.mu.Lock()
	for _, r := range recs {
		e.offer(r.Suffix, r.Value)
	}
	e.mu.Unlock()
	e.poke()
}

func (e *Exporter) onRestored() {
	e.mu.Lock()
	e.rescan = true
	e.mu.Unlock()
	e.poke()
}

func (e *Exporter) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func suffixOf(key string) string {
	if s, ok := strings.CutPrefix(key, RefusedPrefix); ok {
		return s
	}
	return strings.TrimPrefix(key, AuditPrefix)
}

func pendingRecord(v []byte) bool {
	var r adminpb.AuditRecord
	return proto.Unmarshal(v, &r) == nil && r.GetCode() == AuditPending
}

// offer holds a version of the record suffix, if it is yet to be
// written; under mu.
func (e *Exporter) offer(suffix string, v []byte) {
	if old, ok := e.held[suffix]; ok {
		if pendingRecord(v) && !pendingRecord(old) {
			return // a reread older than what was applied since
		}
		e.heldBytes += len(v) - len(old)
		e.held[suffix] = v
		return
	}
	if _, ok := e.late[suffix]; ok {
		if !pendingRecord(v) {
			e.held[suffix] = v
			e.heldBytes += len(v)
		}
		return
	}
	if suffix <= e.after || (e.gap != "" && suffix >= e.gap) {
		return // written, or to be reread
	}
	if e.heldBytes+len(v) > e.maxHeld {
		e.setGap(suffix)
		return
	}
	e.held[suffix] = v
	e.heldBytes += len(v)
}

// setGap lets go of the records from suffix on, to be reread from the
// state; under mu.
func (e *Exporter) setGap(suffix string) {
	if e.gap == "" {
		e.overflows.Inc()
	}
	if e.gap != "" && e.gap <= suffix {
		return
	}
	e.gap = suffix
	for s := range e.held {
		if s >= suffix {
			e.drop(s)
		}
	}
}

// read takes from the state a page of each space's records: past after,
// or, to fill a gap, past the newest held before it; under mu. What lies
// past the page is a gap to read next.
func (e *Exporter) read(sc PageScanner) {
	base := e.after
	if e.gap != "" {
		for s := range e.held {
			if s > base && s < e.gap {
				base = s
			}
		}
	}
	type rec struct {
		suffix string
		v      []byte
	}
	var recs []rec
	cut := ""
	for _, prefix := range []string{AuditPrefix, RefusedPrefix} {
		n := 0
		ScanRecords(sc, prefix, base, func(r StoredRecord) bool {
			if n++; n > Batch {
				if cut == "" || r.Suffix < cut {
					cut = r.Suffix
				}
				return false
			}
			recs = append(recs, rec{r.Suffix, r.Value})
			return true
		})
	}
	slices.SortFunc(recs, func(a, b rec) int { return strings.Compare(a.suffix, b.suffix) })
	e.gap, e.rescan = "", false
	for _, r := range recs {
		if cut != "" && r.suffix >= cut {
			break
		}
		e.offer(r.suffix, r.v)
	}
	if cut != "" {
		e.setGap(cut)
	}
}

// line is a record to write: its suffix, the version written, the
// record, and its line, made outside mu (lines).
type exportLine struct {
	suffix  string
	v       []byte
	rec     *adminpb.AuditRecord
	line    []byte
	pending bool
}

// next picks the lines to write now, in order; under mu.
func (e *Exporter) next(now time.Time) ([]exportLine, error) {
	suffixes := make([]string, 0, len(e.held))
	for s := range e.held {
		suffixes = append(suffixes, s)
	}
	slices.Sort(suffixes)
	var out []exportLine
	holding := e.heldBytes <= e.maxHeld/2
	for _, s := range suffixes {
		if e.gap != "" && s >= e.gap {
			break // the records before it are yet to be read
		}
		v := e.held[s]
		r := new(adminpb.AuditRecord)
		if err := proto.Unmarshal(v, r); err != nil {
			e.x.Log.Error("audit file: a record that does not decode is skipped", "id", s, "error", err)
			e.drop(s)
			continue
		}
		_, late := e.late[s]
		pending := r.GetCode() == AuditPending
		if !late && pending && holding && now.UnixMilli()-r.GetCommittedUnixMs() < exportGrace.Milliseconds() {
			break // its outcome is on its way: the export waits for it
		}
		out = append(out, exportLine{suffix: s, v: v, rec: r, pending: pending})
	}
	return out, nil
}

// lines makes each picked record's line, its args rendered (RenderArgs):
// outside mu, which the FSM's apply takes (onPut), as that is most of
// the work.
func (e *Exporter) lines(picked []exportLine) error {
	for i := range picked {
		RenderArgs(picked[i].rec)
		b, err := json.Marshal(lineOf(picked[i].rec, e.x.Node))
		if err != nil {
			return fmt.Errorf("admin: audit file: %w", err)
		}
		picked[i].line = append(b, '\n')
	}
	return nil
}

func (e *Exporter) drop(suffix string) {
	e.heldBytes -= len(e.held[suffix])
	delete(e.held, suffix)
}

// written notes lines as written; under mu. A version applied since
// one was picked stays held: the outcome of a record written PENDING.
func (e *Exporter) written(lines []exportLine, now time.Time) {
	for _, l := range lines {
		if bytes.Equal(e.held[l.suffix], l.v) {
			e.drop(l.suffix)
		}
		if l.pending {
			e.late[l.suffix] = now
		} else {
			delete(e.late, l.suffix)
		}
		e.after = max(e.after, l.suffix)
	}
}

// Export writes the records that are final, in order, up to the first
// whose outcome is yet to come; it reads the state first if it must.
func (e *Exporter) Export() error {
	now := e.x.Clock.Now()
	e.mu.Lock()
	if e.x.Scan != nil && (e.rescan || !e.observed) {
		e.read(e.x.Scan)
	}
	for s, at := range e.late {
		if now.Sub(at) > exportLateFor {
			delete(e.late, s)
		}
	}
	lines, err := e.next(now)
	e.mu.Unlock()
	if err == nil {
		err = e.lines(lines)
	}
	if err != nil {
		return err
	}
	// The file is written outside mu: a slow disk must not hold up the
	// FSM applying (onPut).
	var buf bytes.Buffer
	var inBuf []exportLine
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		if e.f == nil { // a rotation could not open the file again
			if err := e.open(); err != nil {
				return err
			}
		}
		if _, err := e.f.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("admin: audit file: %w", err)
		}
		e.size += int64(buf.Len())
		buf.Reset()
		e.mu.Lock()
		e.written(inBuf, now)
		e.mu.Unlock()
		inBuf = inBuf[:0]
		return nil
	}
	for _, l := range lines {
		if e.size+int64(buf.Len()+len(l.line)) > e.cfg.MaxBytes && e.size+int64(buf.Len()) > 0 {
			if err := flush(); err != nil {
				return err
			}
			if err := e.rotate(); err != nil {
				if e.f == nil {
					return err
				}
				if !e.rotateFailed {
					e.x.Log.Warn("audit file not rotated: writing on past its size", "path", e.cfg.Path, "error", err)
				}
				e.rotateFailed = true
			} else {
				e.rotateFailed = false
			}
		}
		buf.Write(l.line)
		inBuf = append(inBuf, l)
	}
	if err := flush(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noteGap()
	return nil
}

// noteGap logs a gap opening and closing, and has one read when the
// records before it are written; under mu.
func (e *Exporter) noteGap() {
	switch {
	case e.gap != "" && !e.overflowing:
		e.overflowing = true
		e.x.Log.Warn("audit file: the export is behind and its queue full; the records past it are reread from the trail, where pruning may take some first",
			"path", e.cfg.Path, "from", e.gap)
	case e.gap == "" && !e.rescan && e.overflowing:
		e.overflowing = false
		e.x.Log.Info("audit file: the export caught up", "path", e.cfg.Path)
	}
	if e.gap != "" {
		e.rescan = true
		e.poke()
	}
}

// Run exports until Stop: as records are applied, and every
// exportEvery for a PENDING record's grace.
func (e *Exporter) Run() {
	defer e.x.Loops.Done()
	// The file open at the end: a rotation replaced the first.
	defer func() { _ = e.f.Close() }()
	defer e.observe()()
	t := time.NewTicker(exportEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-e.x.Stop:
			if err := e.Export(); err != nil {
				e.x.Log.Error("audit file", "path", e.cfg.Path, "error", err)
			}
			return
		case <-t.C:
		case <-e.wake:
		}
		err := e.Export()
		switch {
		case err != nil && !failing:
			e.x.Log.Error("audit file: records not exported; trying again", "path", e.cfg.Path, "error", err)
		case err == nil && failing:
			e.x.Log.Info("audit file: exporting again", "path", e.cfg.Path)
		}
		failing = err != nil
	}
}

// ExporterConfig is what an Exporter needs of its master.
type ExporterConfig struct {
	// Node names the master in each line (exported_by).
	Node  string
	Clock clock.Clock
	// Observe has the state tell of the records as they are applied, if
	// it can (nil: each export reads the state); it returns the stop.
	Observe func(o *raftfsm.PutObserver) (stop func())
	// Scan reads the state's records (nil: only those observed are
	// exported).
	Scan PageScanner
	// Stop ends Run; Loops counts it (Run's caller adds it).
	Stop  <-chan struct{}
	Loops *sync.WaitGroup
	Log   hclog.Logger
	// Metrics, if set, receives the export's counter.
	Metrics prometheus.Registerer
}

// Close closes the file (Run does when it ends).
func (e *Exporter) Close() error { return e.f.Close() }

// SetMaxHeld bounds the bytes of the records held (default 32 MiB): past
// half of it a PENDING record no longer holds back those after it, and
// past all of it the queue overflows.
func (e *Exporter) SetMaxHeld(n int) {
	e.mu.Lock()
	e.maxHeld = n
	e.mu.Unlock()
}

// Overflows counts the times the queue filled (baton_audit_file_overflows_total).
func (e *Exporter) Overflows() prometheus.Counter { return e.overflows }
