package domain

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
)

// Key prefixes of the replicated domain state (see the package doc).
const (
	nsPrefix     = "ns/"
	tablePrefix  = "table/"
	regionPrefix = "region/"
	serverPrefix = "server/"
	lockPrefix   = "lock/"
)

// DefaultNamespace always exists: tables named without a namespace live in
// it, and it cannot be deleted (HBase's "default").
const DefaultNamespace = "default"

// NamespaceKey is the key of namespace name.
func NamespaceKey(name string) string { return nsPrefix + name }

// TableKey is the key of table "ns:name".
func TableKey(fullName string) string { return tablePrefix + fullName }

// RegionKey is the key of a region.
func RegionKey(name string) string { return regionPrefix + name }

// ServerKey is the key of region server id.
func ServerKey(id string) string { return serverPrefix + id }

// LockKey is the key of external lock (lock procedure) id.
func LockKey(id uint64) string { return fmt.Sprintf("%s%020d", lockPrefix, id) }

// Table states.
const (
	TableCreating  = "CREATING"
	TableEnabled   = "ENABLED"
	TableDisabling = "DISABLING"
	TableDisabled  = "DISABLED"
	TableEnabling  = "ENABLING"
	TableDeleting  = "DELETING"
)

// Region states.
const (
	RegionOffline    = "OFFLINE"
	RegionOpening    = "OPENING"
	RegionOpen       = "OPEN"
	RegionClosing    = "CLOSING"
	RegionClosed     = "CLOSED"
	RegionFailedOpen = "FAILED_OPEN"
)

// Server states as replicated. Suspect is not replicated: it is the leader's
// lease view (renewals are not replicated).
const (
	ServerLive    = "live"
	ServerExpired = "expired"
	// ServerUnconfirmed is shown, never replicated nor decided on: the
	// lease holds on a new leader's grace alone, no heartbeat came yet.
	ServerUnconfirmed = "unconfirmed"
	// ServerLeaseUnknown is shown by a master that answers a stale read
	// without a leader to ask: the server is recorded live, but only the
	// leader knows whether its lease holds.
	ServerLeaseUnknown = "unknown"
)

// Namespace is the value at ns/<name>.
type Namespace struct {
	Name string `json:"name"`
}

// Table is the value at table/<ns>:<name>.
//
// Its regions are named by the creating procedure and their index
// (RegionName(full, i, ProcID), i < RegionCount), so the record stays a
// few bytes whatever the table's size: every change of the table's state
// rewrites it, and a list of a million names would be written again
// each time.
type Table struct {
	State string `json:"state"`
	// RegionCount is the number of regions.
	RegionCount int `json:"region_count,omitempty"`
	// Regions is the list of region names of records written before
	// RegionCount (read, and kept when such a record is rewritten; never
	// written for a new table). Read the names with regionNames.
	Regions []string `json:"regions,omitempty"`
	// ProcID is the procedure that created the table: a rollback of that
	// create deletes the layout only if it is its own, and it names the
	// regions.
	ProcID uint64 `json:"proc_id,omitempty"`
}

// regionNames lists the regions of table full, in index order.
func (t Table) regionNames(full string) []string {
	if len(t.Regions) > 0 {
		return t.Regions
	}
	out := make([]string, t.RegionCount)
	for i := range out {
		out[i] = RegionName(full, i, t.ProcID)
	}
	return out
}

// regionTotal is the number of regions of the table.
func (t Table) regionTotal() int {
	if len(t.Regions) > 0 {
		return len(t.Regions)
	}
	return t.RegionCount
}

// Region is the value at region/<name>.
type Region struct {
	Table     string `json:"table"` // "ns:name"
	State     string `json:"state"`
	Server    string `json:"server,omitempty"`
	StartCode uint64 `json:"start_code,omitempty"`
	// ProcID is the procedure moving the region, 0 when none.
	ProcID uint64 `json:"proc_id,omitempty"`
}

// Server is the value at server/<id>.
type Server struct {
	Address   string `json:"address"`
	StartCode uint64 `json:"start_code"`
	State     string `json:"state"`
	// Dropped is the start code the registering process said it held last
	// and gave up (0: none): proof that it and every earlier incarnation
	// of the process serve nothing (see services.presenceOf).
	Dropped uint64 `json:"dropped_start_code,omitempty"`
	// Version and MaxFormat are the incarnation's binary as it said at
	// registration (RegisterServerRequest fields 101, 102); empty and 0
	// when it did not say (a 0.1.0 region server, or a record a 0.1.0
	// leader wrote): it counts as version.Unreported.
	//
	// Written at every cluster version, as nodes/<id>/admin_addr_proven
	// is: 0.1.0 reads this record only with encoding/json into its
	// four-field Server, which skips names it does not know
	// (internal/compat TestServerRecordVersionIgnoredBy010), and writes
	// it back (expiry) without them, which only makes the incarnation
	// unreported. And its value is wanted most below cluster version 2,
	// while an upgrade is under way (upgrade-check).
	Version   string         `json:"version,omitempty"`
	MaxFormat version.Format `json:"max_format,omitempty"`
}

// Lock is the value at lock/<id>: an external lock that is held.
type Lock struct {
	Kind        string   `json:"kind"`
	Names       []string `json:"names"`
	Exclusive   bool     `json:"exclusive"`
	Holder      string   `json:"holder"`
	Description string   `json:"description,omitempty"`
}

// ServerRef names one incarnation of a region server.
type ServerRef struct {
	ID        string `json:"id"`
	StartCode uint64 `json:"start_code"`
}

// String is "id/startcode". Built without fmt: every open names its
// server in its wait's event.
func (r ServerRef) String() string { return r.ID + "/" + strconv.FormatUint(r.StartCode, 10) }

// IsZero reports whether r names no server.
func (r ServerRef) IsZero() bool { return r.ID == "" }

// onServer reports whether the region's record places it on (or moving
// on or off) incarnation ref.
func (r Region) onServer(ref ServerRef) bool {
	return r.Server == ref.ID && r.StartCode == ref.StartCode &&
		(r.State == RegionOpen || r.State == RegionOpening || r.State == RegionClosing)
}

// SplitTableName splits "ns:name" (or "name", meaning the default
// namespace).
func SplitTableName(full string) (ns, name string) {
	if i := strings.IndexByte(full, ':'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return DefaultNamespace, full
}

// FullTableName is "ns:name"; an empty ns means the default namespace.
func FullTableName(ns, name string) string {
	if ns == "" {
		ns = DefaultNamespace
	}
	return ns + ":" + name
}

// RegionName names region i of a table created by procedure procID:
// "ns:name,00003,<procID>". The procedure id makes names unique across a
// table's deletion and re-creation, so a late open meant for a region of
// the old table can never be taken for one of the new.
func RegionName(table string, i int, procID uint64) string {
	if i < 0 {
		return fmt.Sprintf("%s,%05d,%d", table, i, procID)
	}
	// The same by hand, without fmt: a create names each of its regions.
	var num [20]byte
	idx := strconv.AppendInt(num[:0], int64(i), 10)
	b := make([]byte, 0, len(table)+len(idx)+26)
	b = append(b, table...)
	b = append(b, ',')
	for k := len(idx); k < 5; k++ {
		b = append(b, '0')
	}
	b = append(b, idx...)
	b = append(b, ',')
	b = strconv.AppendUint(b, procID, 10)
	return string(b)
}

// MaxNameLen is the longest namespace or table name.
const MaxNameLen = 128

// CheckName checks a namespace or table name (what says which): letters,
// digits, '_', '-', '.', at most MaxNameLen characters (HBase's rule,
// roughly). No ':' or ',' or '/', which the keys and region names use as
// separators. Exported so that clients refuse a bad name before sending
// it, with the same words as the masters.
func CheckName(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s name", what)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%s name %.20q... is %d characters long, longer than %d", what, s, len(s), MaxNameLen)
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok {
			return fmt.Errorf("%s name %q: character %q not allowed (ASCII letters, digits, _ - . only)", what, s, c)
		}
	}
	return nil
}

// validName is CheckName as an invalid-argument error of the domain.
func validName(what, s string) error {
	if err := CheckName(what, s); err != nil {
		return procedure.WithKind(errInvalid, err)
	}
	return nil
}

// reader is the read side shared by procedure steps (procedure.Context,
// which sees the step's own pending writes through Get) and the API (the
// local FSM).
type reader interface {
	get(key string) ([]byte, bool, error)
	scan(prefix string, fn func(key string, value []byte) bool) error
}

// kvReader adapts an FSM-like Get/Scan pair.
type kvReader struct {
	Get  func(key string) ([]byte, bool)
	Scan func(prefix string, fn func(string, []byte) bool)
}

func (r kvReader) get(key string) ([]byte, bool, error) {
	v, ok := r.Get(key)
	return v, ok, nil
}

func (r kvReader) scan(prefix string, fn func(string, []byte) bool) error {
	r.Scan(prefix, fn)
	return nil
}

// getJSON reads key into v; found is false for an absent key.
func getJSON(r reader, key string, v any) (found bool, err error) {
	b, ok, err := r.get(key)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decoding %s: %w", key, err)
	}
	return true, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", v, err)) // plain structs: cannot fail
	}
	return b
}

func getTable(r reader, full string) (Table, bool, error) {
	var t Table
	ok, err := getJSON(r, TableKey(full), &t)
	return t, ok, err
}

func getRegion(r reader, name string) (Region, bool, error) {
	b, ok, err := r.get(RegionKey(name))
	if err != nil || !ok {
		return Region{}, false, err
	}
	rg, err := decodeRegion(name, b)
	return rg, err == nil, err
}

func getServer(r reader, id string) (Server, bool, error) {
	var s Server
	ok, err := getJSON(r, ServerKey(id), &s)
	return s, ok, err
}

// knownRegion is getRegion for a region that must exist: its absence is
// ErrNotFound, as the calls that name a region answer it.
func knownRegion(r reader, name string) (Region, error) {
	rg, ok, err := getRegion(r, name)
	if err == nil && !ok {
		err = procedure.Errorf(ErrNotFound, "region %q does not exist", name)
	}
	return rg, err
}

// knownServer is getServer for a server that must exist: its absence is
// ErrNotFound, as the calls that name a server answer it.
func knownServer(r reader, id string) (Server, error) {
	s, ok, err := getServer(r, id)
	if err == nil && !ok {
		err = procedure.Errorf(ErrNotFound, "region server %q is not known to the cluster", id)
	}
	return s, err
}

func namespaceExists(r reader, ns string) (bool, error) {
	if ns == DefaultNamespace {
		return true, nil
	}
	_, ok, err := r.get(NamespaceKey(ns))
	return ok, err
}

// scanRegions calls fn for every region record, in name order.
func scanRegions(r reader, fn func(name string, rg Region) bool) error {
	var derr error
	err := r.scan(regionPrefix, func(k string, v []byte) bool {
		name := strings.TrimPrefix(k, regionPrefix)
		rg, err := decodeRegion(name, v)
		if err != nil {
			derr = err
			return false
		}
		return fn(name, rg)
	})
	if err != nil {
		return err
	}
	return derr
}

// scanServers returns every server record by id.
func scanServers(r reader) (map[string]Server, error) {
	return scanServersWith(r, decodeServer)
}

// scanServersWith returns every server record by id, each decoded by
// decode (decodeServer, or a serverRecords cache's).
func scanServersWith(r reader, decode func(key string, v []byte) (Server, error)) (map[string]Server, error) {
	return scanRecords(r, serverPrefix, serverPrefix, decode)
}

// decodeServer decodes the server record v stored at key.
func decodeServer(key string, v []byte) (Server, error) { return decodeRecord[Server](key, v) }

// scanTables returns every table record by full name, optionally only of
// namespace ns.
func scanTables(r reader, ns string) (map[string]Table, error) {
	prefix := tablePrefix
	if ns != "" {
		prefix += ns + ":"
	}
	return scanRecords(r, prefix, tablePrefix, decodeRecord[Table])
}

// scanRecords returns every record under prefix, decoded by decode, by
// its key less kind (the prefix of its kind of record); the first record
// that does not decode ends the scan with its error.
func scanRecords[T any](r reader, prefix, kind string, decode func(key string, v []byte) (T, error)) (map[string]T, error) {
	out := map[string]T{}
	var derr error
	err := r.scan(prefix, func(k string, v []byte) bool {
		x, err := decode(k, v)
		if err != nil {
			derr = err
			return false
		}
		out[strings.TrimPrefix(k, kind)] = x
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, derr
}

// decodeRecord decodes the JSON record v stored at key.
func decodeRecord[T any](key string, v []byte) (T, error) {
	var x T
	if err := json.Unmarshal(v, &x); err != nil {
		var zero T
		return zero, fmt.Errorf("decoding %s: %w", key, err)
	}
	return x, nil
}

// scanNamespaces lists the namespaces, the default one included, sorted.
func scanNamespaces(r reader) ([]string, error) {
	out := []string{DefaultNamespace}
	err := r.scan(nsPrefix, func(k string, _ []byte) bool {
		if n := strings.TrimPrefix(k, nsPrefix); n != DefaultNamespace {
			out = append(out, n)
		}
		return true
	})
	sort.Strings(out)
	return out, err
}

// countOf is "1 region" or "n regions": what operators read.
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
