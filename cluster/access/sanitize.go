package access

import (
	"net/http"

	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Bounds of a record's fields as stored: what the leader accepts of a
// standby's AppendAudit (reqlimit.Fields), and a method short enough to
// filter ListAudit by (ListAuditRequest.method).
const (
	identMax  = 256
	nameMax   = 260
	methodMax = 64
	addrMax   = 300
)

// SanitizeRecord makes every field of r fit the limits, whatever a
// caller put in it (a path, an HTTP method, a gRPC method name, a token's
// name stored before the limits): each escaped (reqlimit.Escape: no
// control or invisible character, no byte that is not UTF-8) and cut at a
// rune. A record that did not fit would be lost: refused by the leader's
// AppendAudit, or unmarshalable (not UTF-8) on the leader itself.
func SanitizeRecord(r *adminpb.AuditRecord) {
	fit := func(s string, max int) string { return Cut(reqlimit.Escape(s), max) }
	r.Id = fit(r.GetId(), identMax)
	r.Principal = fit(r.GetPrincipal(), identMax)
	r.Name = fit(r.GetName(), nameMax)
	r.Method = fit(r.GetMethod(), methodMax)
	if len(r.GetRequest()) > requestMax || (len(r.GetRequest()) > 0 && r.GetArgs() != "") {
		// Not a form NewRequestRecord makes: kept as args, which a
		// reader need not make.
		r.Args = ""
		RenderArgs(r)
	}
	r.Args = fit(r.GetArgs(), FieldMax)
	r.ArgsDigest = fit(r.GetArgsDigest(), identMax)
	r.Code = fit(r.GetCode(), methodMax)
	r.Message = fit(r.GetMessage(), FieldMax)
	r.Node = fit(r.GetNode(), identMax)
	r.Peer = fit(r.GetPeer(), addrMax)
	r.Via = fit(r.GetVia(), identMax)
	if len(r.ProcIds) > procIDsMax {
		r.ProcIds = r.ProcIds[:procIDsMax]
	}
}

// httpVerbs are the methods an HTTP refusal's record names; any other
// (a caller may send any token as the method) is recorded as "HTTP".
var httpVerbs = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// HTTPMethod is the record's method of an HTTP request: "HTTP GET",
// a word to filter by; the request line goes in the record's args.
func HTTPMethod(r *http.Request) string {
	if httpVerbs[r.Method] {
		return "HTTP " + r.Method
	}
	return "HTTP"
}

// HTTPArgs is what an HTTP request's record says of it: its method
// and path as the caller sent them (SanitizeRecord escapes and cuts).
func HTTPArgs(r *http.Request) string { return r.Method + " " + r.URL.Path }
