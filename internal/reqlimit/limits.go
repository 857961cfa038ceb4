// Package reqlimit bounds what a request may carry. Every string, bytes,
// repeated and map field of every request of the admin API, the Master
// service and the region-server protocol has a limit in Fields; a server
// checks a request against them (Check, through the interceptors of
// ServerOptions) before it does anything with it, so that no caller can
// have an oversized or malformed value stored in the replicated state and
// rewritten on every step. docs/security.md tables the limits and why.
package reqlimit

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field is the limit of one field. For a string or bytes field Bytes
// bounds its length; for a repeated field Items bounds its entries and
// Bytes each entry (a string's); for a map Items bounds its entries, Bytes
// each key and each value, and Total all keys and values together.
// Ident refuses control characters and invisible ones (Invisible): the
// value names someone or something and is printed on terminals and pages,
// where a right-to-left override or a zero-width space would make it read
// as another name.
type Field struct {
	Bytes int
	Items int
	Total int
	Ident bool
}

// The limits most fields share, with headroom over what Baton's own
// clients send (docs/security.md says why each).
var (
	// name: namespaces, tables, clients, tokens (CheckName's 128, with
	// room for "ns:" before a table).
	name = Field{Bytes: 260, Ident: true}
	// region: "ns:table,00042,<proc id>", two names and two numbers.
	region = Field{Bytes: 512, Ident: true}
	// ident: owners, holders, nonces, callers, server and node ids.
	ident = Field{Bytes: 256, Ident: true}
	// addr: host:port, a DNS name up to 253 bytes.
	addr = Field{Bytes: 300, Ident: true}
	// enum: a state, kind, type or permission word.
	enum = Field{Bytes: 64, Ident: true}
	// token: an opaque page token (an id, a name, a record key).
	token = Field{Bytes: 1024, Ident: true}
	// text: free text for people (a description, a reason, an error).
	text = Field{Bytes: 4096}
)

// Limits of a procedure's arguments (SubmitProcedureRequest.arguments):
// the built-in and example types take a handful of short values.
const (
	MaxArguments      = 64
	MaxArgumentKey    = 128
	MaxArgumentValue  = 16 << 10
	MaxArgumentsTotal = 64 << 10
)

// Fields holds every limited field by its full protobuf name.
// TestEveryRequestFieldHasALimit fails when a request gains a string,
// bytes, repeated or map field not listed here.
var Fields = map[protoreflect.FullName]Field{
	// Admin API.
	"baton.admin.v1.SubmitProcedureRequest.type":       enum,
	"baton.admin.v1.SubmitProcedureRequest.arguments":  {Items: MaxArguments, Bytes: MaxArgumentValue, Total: MaxArgumentsTotal},
	"baton.admin.v1.SubmitProcedureRequest.nonce":      ident,
	"baton.admin.v1.SubmitProcedureRequest.owner":      ident,
	"baton.admin.v1.ListProceduresRequest.state":       enum,
	"baton.admin.v1.ListProceduresRequest.type":        enum,
	"baton.admin.v1.ListProceduresRequest.page_token":  token,
	"baton.admin.v1.ListProceduresRequest.owner":       ident,
	"baton.admin.v1.AddPeerRequest.id":                 ident,
	"baton.admin.v1.AddPeerRequest.raft_address":       addr,
	"baton.admin.v1.AddPeerRequest.admin_address":      addr,
	"baton.admin.v1.RemovePeerRequest.id":              ident,
	"baton.admin.v1.RegisterNodeRequest.id":            ident,
	"baton.admin.v1.RegisterNodeRequest.admin_address": addr,
	"baton.admin.v1.RegisterNodeRequest.http_address":  addr,
	"baton.admin.v1.NamespaceRequest.name":             name,
	"baton.admin.v1.NamespaceRequest.nonce":            ident,
	"baton.admin.v1.GetNamespaceRequest.name":          name,
	"baton.admin.v1.CreateTableRequest.namespace":      name,
	"baton.admin.v1.CreateTableRequest.name":           name,
	"baton.admin.v1.CreateTableRequest.nonce":          ident,
	"baton.admin.v1.TableRequest.namespace":            name,
	"baton.admin.v1.TableRequest.name":                 name,
	"baton.admin.v1.TableRequest.nonce":                ident,
	"baton.admin.v1.ListTablesRequest.namespace":       name,
	"baton.admin.v1.ListTablesRequest.page_token":      token,
	"baton.admin.v1.ListTablesRequest.states":          {Items: 16, Bytes: enum.Bytes, Ident: true},
	"baton.admin.v1.ListRegionsRequest.table":          name,
	"baton.admin.v1.ListRegionsRequest.page_token":     token,
	"baton.admin.v1.ListRegionsRequest.states":         {Items: 16, Bytes: enum.Bytes, Ident: true},
	"baton.admin.v1.ListRegionsRequest.server":         ident,
	"baton.admin.v1.MoveRegionRequest.region":          region,
	"baton.admin.v1.MoveRegionRequest.to_server":       ident,
	"baton.admin.v1.MoveRegionRequest.nonce":           ident,
	"baton.admin.v1.ListServersRequest.page_token":     token,
	"baton.admin.v1.ListNamespacesRequest.page_token":  token,
	"baton.admin.v1.ListLocksRequest.page_token":       token,
	"baton.admin.v1.ServerRegionsRequest.server":       ident,
	"baton.admin.v1.ServerRegionsRequest.page_token":   token,
	"baton.admin.v1.BalanceRequest.nonce":              ident,
	"baton.admin.v1.AcquireLockRequest.kind":           enum,
	// A lock on regions names them all: a table's regions, with room.
	"baton.admin.v1.AcquireLockRequest.names":       {Items: 10000, Bytes: region.Bytes, Ident: true},
	"baton.admin.v1.AcquireLockRequest.holder":      ident,
	"baton.admin.v1.AcquireLockRequest.description": text,
	"baton.admin.v1.AcquireLockRequest.nonce":       ident,
	"baton.admin.v1.RepairRegionRequest.region":     region,
	"baton.admin.v1.RepairRegionRequest.server":     ident,
	"baton.admin.v1.RepairRegionRequest.nonce":      ident,
	"baton.admin.v1.RepairCaller.caller":            ident,
	"baton.admin.v1.RecoverServerRequest.server":    ident,
	"baton.admin.v1.CancelProceduresRequest.type":   enum,
	"baton.admin.v1.CancelProceduresRequest.state":  enum,
	"baton.admin.v1.CancelProceduresRequest.owner":  ident,
	// ids: what a dry run listed, sent back to confirm it.
	"baton.admin.v1.CancelProceduresRequest.ids":      {Items: 100000},
	"baton.admin.v1.SetMaintenanceRequest.reason":     text,
	"baton.admin.v1.ListRepairsRequest.page_token":    token,
	"baton.admin.v1.AclGrantRequest.client":           name,
	"baton.admin.v1.AclGrantRequest.permission":       enum,
	"baton.admin.v1.AclRevokeRequest.client":          name,
	"baton.admin.v1.AclCreateTokenRequest.name":       name,
	"baton.admin.v1.AclCreateTokenRequest.permission": enum,
	"baton.admin.v1.AclDeleteTokenRequest.accessor":   ident,
	"baton.admin.v1.AclListRequest.page_token":        token,
	"baton.admin.v1.ListAuditRequest.page_token":      token,
	"baton.admin.v1.ListAuditRequest.principal":       ident,
	"baton.admin.v1.ListAuditRequest.method":          enum,
	// A standby's audit records, batched by 256; each field as the
	// leader cuts it (args and message at 512 bytes).
	"baton.admin.v1.AppendAuditRequest.records": {Items: 1024},
	"baton.admin.v1.AuditRecord.id":             ident,
	"baton.admin.v1.AuditRecord.principal":      ident,
	"baton.admin.v1.AuditRecord.name":           name,
	"baton.admin.v1.AuditRecord.method":         enum,
	"baton.admin.v1.AuditRecord.args":           {Bytes: 1024},
	"baton.admin.v1.AuditRecord.args_digest":    ident,
	"baton.admin.v1.AuditRecord.code":           enum,
	"baton.admin.v1.AuditRecord.message":        {Bytes: 1024},
	"baton.admin.v1.AuditRecord.proc_ids":       {Items: 100000},
	"baton.admin.v1.AuditRecord.node":           ident,
	"baton.admin.v1.AuditRecord.peer":           addr,
	"baton.admin.v1.AuditRecord.via":            ident,

	// Master service (region servers).
	"baton.rs.v1.RegisterServerRequest.server_id": ident,
	"baton.rs.v1.RegisterServerRequest.address":   addr,
	// regions a server still hosts as it registers: a table's worth.
	"baton.rs.v1.RegisterServerRequest.regions": {Items: 100000, Bytes: region.Bytes, Ident: true},
	"baton.rs.v1.HeartbeatRequest.server_id":    ident,
	// A region server escapes and cuts each report at 512 bytes and sends
	// at most 128 a heartbeat; the limits leave room above that and refuse
	// no character, since a heartbeat refused would cost the server its
	// lease (a server of another build may escape less): the leader
	// escapes and cuts what it records (sanitizeAuditRecord).
	"baton.rs.v1.HeartbeatRequest.refusals":         {Items: 1024},
	"baton.rs.v1.RefusalReport.caller":              {Bytes: 1024},
	"baton.rs.v1.RefusalReport.method":              {Bytes: 1024},
	"baton.rs.v1.RefusalReport.code":                {Bytes: 1024},
	"baton.rs.v1.RefusalReport.message":             {Bytes: 2048},
	"baton.rs.v1.RefusalReport.peer":                {Bytes: 1024},
	"baton.rs.v1.ReportTransitionRequest.server_id": ident,
	"baton.rs.v1.ReportTransitionRequest.region":    region,
	"baton.rs.v1.ReportTransitionRequest.state":     enum,
	"baton.rs.v1.ReportTransitionRequest.error":     text,

	// Region-server protocol.
	"baton.rs.v1.BatchRequest.master_id": ident,
	"baton.rs.v1.BatchRequest.server_id": ident,
	// ops: the dispatcher's MaxBatch is at most 4096.
	"baton.rs.v1.BatchRequest.ops":              {Items: 8192},
	"baton.rs.v1.RegionOp.region":               region,
	"baton.rs.v1.RegionOp.table":                name,
	"baton.rs.v1.RegionOp.trace_parent":         {Bytes: 256, Ident: true},
	"baton.rs.v1.ListRegionsRequest.page_token": token,
}

// fallback bounds a field Fields does not list, should one slip past the
// test: tight, so that the omission shows.
var fallback = Field{Bytes: 256, Items: 100, Total: 4096, Ident: true}

// Check checks req against Fields, its nested messages included, and
// returns an INVALID_ARGUMENT status naming the first field out of bounds
// and its limit.
func Check(req proto.Message) error {
	if err := checkMessage(req.ProtoReflect()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// fieldError is a field out of bounds. Check runs on every request, so
// the field's path is put together only when one is: each level of the
// walk puts its part in front as the error comes back up.
type fieldError struct {
	path string // from the field the error came up to; "" at the field out of bounds
	msg  string
}

func (e *fieldError) Error() string { return e.path + ": " + e.msg }

func outOfBounds(format string, args ...any) error {
	return &fieldError{msg: fmt.Sprintf(format, args...)}
}

// under puts part (a field's name, an entry's "[i]") in front of err's
// path.
func under(part string, err error) error {
	e, ok := err.(*fieldError)
	if !ok {
		return err
	}
	switch {
	case e.path == "" || e.path[0] == '[' || e.path[0] == ' ':
		e.path = part + e.path
	default:
		e.path = part + "." + e.path
	}
	return e
}

func checkMessage(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if err = checkField(fd, v); err != nil {
			err = under(string(fd.Name()), err)
		}
		return err == nil
	})
	return err
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func limitOf(fd protoreflect.FieldDescriptor) Field {
	if f, ok := Fields[fd.FullName()]; ok {
		return f
	}
	return fallback
}

func checkField(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	lim := limitOf(fd)
	switch {
	case fd.IsMap():
		return checkMap(fd, v.Map(), lim)
	case fd.IsList():
		l := v.List()
		if lim.Items > 0 && l.Len() > lim.Items {
			return outOfBounds("%d entries, at most %d", l.Len(), lim.Items)
		}
		for i := 0; i < l.Len(); i++ {
			if err := checkValue(fd, l.Get(i), lim); err != nil {
				return under(fmt.Sprintf("[%d]", i), err)
			}
		}
		return nil
	default:
		return checkValue(fd, v, lim)
	}
}

func checkMap(fd protoreflect.FieldDescriptor, m protoreflect.Map, lim Field) error {
	if lim.Items > 0 && m.Len() > lim.Items {
		return outOfBounds("%d entries, at most %d", m.Len(), lim.Items)
	}
	total := 0
	var err error
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		key := k.String()
		total += len(key)
		if len(key) > MaxArgumentKey {
			err = outOfBounds("key %.40q... is %d bytes, at most %d", key, len(key), MaxArgumentKey)
			return false
		}
		if err = checkText(key, Field{Bytes: MaxArgumentKey, Ident: true}); err != nil {
			err = under(" key", err)
			return false
		}
		if fd.MapValue().Kind() == protoreflect.StringKind {
			total += len(v.String())
			err = checkText(v.String(), Field{Bytes: lim.Bytes})
		} else if fd.MapValue().Kind() == protoreflect.MessageKind {
			err = checkMessage(v.Message())
		}
		if err != nil {
			err = under(fmt.Sprintf("[%q]", key), err)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if lim.Total > 0 && total > lim.Total {
		return outOfBounds("%d bytes in all, at most %d", total, lim.Total)
	}
	return nil
}

func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, lim Field) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return checkText(v.String(), lim)
	case protoreflect.BytesKind:
		if n := len(v.Bytes()); n > lim.Bytes {
			return outOfBounds("%d bytes, at most %d", n, lim.Bytes)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message())
	}
	return nil
}

func checkText(s string, lim Field) error {
	if len(s) > lim.Bytes {
		return outOfBounds("%d bytes, at most %d", len(s), lim.Bytes)
	}
	if lim.Ident {
		if i := strings.IndexFunc(s, Invisible); i >= 0 {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return outOfBounds("%s %+q at byte %d: not allowed in an identifier", invisibleKind(r), r, i)
		}
	}
	return nil
}

// Invisible says r is not shown as itself: a control character (Cc: an
// escape sequence's ESC, a newline), a format character (Cf: the bidi
// overrides and isolates U+202A-202E and U+2066-2069, the zero-width
// U+200B-200F, U+2060 and U+FEFF, tag characters) or a line or paragraph
// separator (U+2028, U+2029, which some terminals break lines at).
func Invisible(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

func invisibleKind(r rune) string {
	if unicode.IsControl(r) {
		return "control character"
	}
	return "invisible character"
}
