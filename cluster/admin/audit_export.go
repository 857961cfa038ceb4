package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// AuditExport configures the export of the audit trail to a file: every
// master writes each record it applies, once final, as one JSON line
// (auditLine), appending to Path, so that the evidence outlives the
// trail's pruning. The file is this master's copy: a record committed
// while it was down is written when it comes back, if the trail still
// holds it. Its last line says where to resume, so no record is written
// twice, and none skipped, across restarts.
type AuditExport struct {
	// Path is the file written; rotated files are Path.1 (the newest) to
	// Path.<Keep>.
	Path string
	// MaxBytes rotates the file before a line would take it past this
	// size. Default 100 MiB.
	MaxBytes int64
	// Keep is how many rotated files are kept besides Path. Default 5.
	Keep int
}

// Defaults of AuditExport.
const (
	DefaultAuditFileMaxBytes = 100 << 20
	DefaultAuditFileKeep     = 5
	// auditExportEvery is how often a master looks for records to export.
	auditExportEvery = 250 * time.Millisecond
	// auditExportGrace is how long a record may say PENDING before it is
	// exported as such: its outcome is normally written over it within
	// auditWriteTimeout; past that the leader that served it died first.
	auditExportGrace = 3 * auditWriteTimeout
)

// Validate reports a bad setting.
func (e AuditExport) Validate() error {
	if e.Path == "" {
		return errors.New("admin: audit file: no path")
	}
	if e.MaxBytes < 0 || e.Keep < 0 {
		return errors.New("admin: audit file: negative size or count")
	}
	return nil
}

func (e AuditExport) withDefaults() AuditExport {
	if e.MaxBytes == 0 {
		e.MaxBytes = DefaultAuditFileMaxBytes
	}
	if e.Keep == 0 {
		e.Keep = DefaultAuditFileKeep
	}
	return e
}

// auditLine is a record as the file has it: snake_case keys, numbers as
// numbers.
type auditLine struct {
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

func lineOf(r *adminpb.AuditRecord, by string) auditLine {
	return auditLine{ID: r.GetId(), AtUnixMs: r.GetAtUnixMs(), CommittedUnixMs: r.GetCommittedUnixMs(), Principal: r.GetPrincipal(),
		Name: r.GetName(), Method: r.GetMethod(), Args: r.GetArgs(), ArgsDigest: r.GetArgsDigest(), Code: r.GetCode(),
		Message: r.GetMessage(), ProcIDs: r.GetProcIds(), Node: r.GetNode(), Peer: r.GetPeer(), Via: r.GetVia(),
		Refused: r.GetRefused(), ExportedBy: by}
}

// auditExporter appends the trail's records to the file, in the order of
// their ids: the order they commit in (one audit entry in flight at a
// time; a later term's entries follow every earlier one that commits).
type auditExporter struct {
	s   *Server
	cfg AuditExport
	f   *os.File
	// size is f's size; after, the suffix (term-n) of the last record
	// written.
	size  int64
	after string
}

func newAuditExporter(s *Server, cfg AuditExport) (*auditExporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &auditExporter{s: s, cfg: cfg.withDefaults()}
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

// lastExported is the suffix of the record on path's last whole line
// ("" for none); a torn last line (a crash mid-write) is cut off.
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
	last := ""
	for sc.Scan() {
		var l auditLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.ID != "" {
			last = l.ID
		}
	}
	if last == "" {
		return "", nil
	}
	key, ok := auditKeyOf(last)
	if !ok {
		return "", fmt.Errorf("admin: audit file %s: last id %q is not a record id", path, last)
	}
	return strings.TrimPrefix(key, auditPrefix), nil
}

func (e *auditExporter) open() error {
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
func (e *auditExporter) rotate() error {
	if err := e.f.Close(); err != nil {
		return fmt.Errorf("admin: audit file: %w", err)
	}
	_ = os.Remove(fmt.Sprintf("%s.%d", e.cfg.Path, e.cfg.Keep))
	for k := e.cfg.Keep - 1; k >= 1; k-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", e.cfg.Path, k), fmt.Sprintf("%s.%d", e.cfg.Path, k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("admin: audit file rotation: %w", err)
		}
	}
	if err := os.Rename(e.cfg.Path, e.cfg.Path+".1"); err != nil {
		return fmt.Errorf("admin: audit file rotation: %w", err)
	}
	return e.open()
}

// export writes the records committed past the last one written, up to
// the first whose outcome is yet to come.
func (e *auditExporter) export() error {
	sc, ok := e.s.b.(auditScanner)
	if !ok {
		return nil
	}
	type next struct {
		suffix string
		rec    *adminpb.AuditRecord
	}
	var recs []next
	// cut: a space's read stopped there, so what lies past it is not
	// known yet.
	cut := ""
	for _, prefix := range []string{auditPrefix, refusedPrefix} {
		from := ""
		if e.after != "" {
			from = prefix + e.after
		}
		n := 0
		sc.DomainScanFrom(prefix, from, func(k string, v []byte) bool {
			suffix := strings.TrimPrefix(k, prefix)
			if n++; n > auditBatch {
				if cut == "" || suffix < cut {
					cut = suffix
				}
				return false
			}
			var r adminpb.AuditRecord
			if proto.Unmarshal(v, &r) == nil {
				recs = append(recs, next{suffix, &r})
			}
			return true
		})
	}
	slices.SortFunc(recs, func(a, b next) int { return strings.Compare(a.suffix, b.suffix) })
	now := e.s.acc.Clock.Now().UnixMilli()
	var buf bytes.Buffer
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		if _, err := e.f.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("admin: audit file: %w", err)
		}
		e.size += int64(buf.Len())
		buf.Reset()
		return nil
	}
	for _, n := range recs {
		if cut != "" && n.suffix >= cut {
			break
		}
		if n.rec.GetCode() == AuditPending && now-n.rec.GetCommittedUnixMs() < auditExportGrace.Milliseconds() {
			break // its outcome is on its way: the export waits for it
		}
		b, err := json.Marshal(lineOf(n.rec, e.s.b.ID()))
		if err != nil {
			return fmt.Errorf("admin: audit file: %w", err)
		}
		b = append(b, '\n')
		if e.size+int64(buf.Len()+len(b)) > e.cfg.MaxBytes && e.size+int64(buf.Len()) > 0 {
			if err := flush(); err != nil {
				return err
			}
			if err := e.rotate(); err != nil {
				return err
			}
		}
		buf.Write(b)
		e.after = n.suffix
	}
	return flush()
}

// run exports until the server stops.
func (e *auditExporter) run() {
	defer e.s.loops.Done()
	defer e.f.Close()
	t := time.NewTicker(auditExportEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-e.s.stopCh:
			if err := e.export(); err != nil {
				e.s.log.Error("audit file", "path", e.cfg.Path, "error", err)
			}
			return
		case <-t.C:
		}
		err := e.export()
		switch {
		case err != nil && !failing:
			e.s.log.Error("audit file: records not exported; trying again", "path", e.cfg.Path, "error", err)
		case err == nil && failing:
			e.s.log.Info("audit file: exporting again", "path", e.cfg.Path)
		}
		failing = err != nil
	}
}
