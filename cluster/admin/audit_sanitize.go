package admin

import (
	"net/http"

	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Bounds of a record's fields as stored: what the leader accepts of a
// standby's AppendAudit (reqlimit.Fields), and a method short enough to
// filter ListAudit by (ListAuditRequest.method).
const (
	auditIdentMax  = 256
	auditNameMax   = 260
	auditMethodMax = 64
	auditAddrMax   = 300
)

// sanitizeAuditRecord makes every field of r fit the limits, whatever a
// caller put in it (a path, an HTTP method, a gRPC method name, a token's
// name stored before the limits): each escaped (reqlimit.Escape: no
// control or invisible character, no byte that is not UTF-8) and cut at a
// rune. A record that did not fit would be lost: refused by the leader's
// AppendAudit, or unmarshalable (not UTF-8) on the leader itself.
func sanitizeAuditRecord(r *adminpb.AuditRecord) {
	fit := func(s string, max int) string { return cut(reqlimit.Escape(s), max) }
	r.Id = fit(r.GetId(), auditIdentMax)
	r.Principal = fit(r.GetPrincipal(), auditIdentMax)
	r.Name = fit(r.GetName(), auditNameMax)
	r.Method = fit(r.GetMethod(), auditMethodMax)
	r.Args = fit(r.GetArgs(), auditFieldMax)
	r.ArgsDigest = fit(r.GetArgsDigest(), auditIdentMax)
	r.Code = fit(r.GetCode(), auditMethodMax)
	r.Message = fit(r.GetMessage(), auditFieldMax)
	r.Node = fit(r.GetNode(), auditIdentMax)
	r.Peer = fit(r.GetPeer(), auditAddrMax)
	r.Via = fit(r.GetVia(), auditIdentMax)
	if len(r.ProcIds) > 100 {
		r.ProcIds = r.ProcIds[:100]
	}
}

// httpVerbs are the methods an HTTP refusal's record names; any other
// (a caller may send any token as the method) is recorded as "HTTP".
var httpVerbs = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// httpAuditMethod is the record's method of an HTTP request: "HTTP GET",
// a word to filter by; the request line goes in the record's args.
func httpAuditMethod(r *http.Request) string {
	if httpVerbs[r.Method] {
		return "HTTP " + r.Method
	}
	return "HTTP"
}

// httpAuditArgs is what an HTTP request's record says of it: its method
// and path as the caller sent them (sanitizeAuditRecord escapes and cuts).
func httpAuditArgs(r *http.Request) string { return r.Method + " " + r.URL.Path }
