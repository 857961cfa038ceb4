package console

import (
	"io/fs"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/security"
)

func (c *Console) routes() {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/", http.StatusFound) })
	mux.HandleFunc("GET /ui/procedures", c.procedures)
	mux.HandleFunc("GET /ui/procedures/{id}", c.procedure)
	mux.Handle("GET /ui/procedures/{id}/abort", c.adminOnly(http.HandlerFunc(c.abortConfirm)))
	// Actions are POSTs from the console's own pages: a form posted from
	// another site is refused, whatever cookies or networks it rides on.
	mux.Handle("POST /ui/procedures/{id}/abort", c.sameOrigin.Handler(c.adminOnly(http.HandlerFunc(c.abort))))
	// The repair kit: GET is the confirmation with the leader's dry run,
	// POST (same-origin, confirm=yes) the call (repair.go).
	c.handleRepair(mux, "/ui/procedures/{id}/bypass", "procedures", c.bypassAction)
	c.handleRepair(mux, "/ui/procedures/cancel", "procedures", c.cancelAction)
	c.handleRepair(mux, "/ui/regions/{region}/assign", "regions", c.regionAction(true))
	c.handleRepair(mux, "/ui/regions/{region}/unassign", "regions", c.regionAction(false))
	c.handleRepair(mux, "/ui/servers/{id}/recover", "servers", c.recoverAction)
	c.handleRepair(mux, "/ui/maintenance", "overview", c.maintenanceAction)
	mux.HandleFunc("GET /ui/repairs", c.repairs)
	mux.Handle("GET /ui/audit", c.adminOnly(http.HandlerFunc(c.audit)))
	mux.HandleFunc("GET /ui/locks", c.locks)
	mux.HandleFunc("GET /ui/servers", c.servers)
	mux.HandleFunc("GET /ui/servers/{id}", c.server)
	mux.HandleFunc("GET /ui/tables", c.tables)
	mux.HandleFunc("GET /ui/regions", c.regions)
	mux.HandleFunc("/", c.notFound)
	c.mux = mux
}

// errorPage is a page that could not be read at all.
type errorPage struct {
	base
	Message string
}

// fail answers a request whose page cannot be shown: this node's API does
// not answer, or the main read failed.
func (c *Console) fail(w http.ResponseWriter, rd *reads, title string, err error) {
	code := statusOf(err)
	msg := status.Convert(err).Message()
	if rd == nil {
		// Not even this node's status: a frame without a header.
		c.render(w, code, "error", errorPage{base: base{Title: title, Header: header{NodeID: "?", Role: "unreachable"}},
			Message: "this node's admin API at " + c.cfg.AdminAddr + " does not answer: " + msg})
		return
	}
	c.render(w, code, "error", errorPage{base: c.base(rd, title, "", false), Message: msg})
}

// adminOnly serves h to a user holding admin (security.PermissionOf, which
// the master's HTTP authorizer sets), and a 403 page to others, recorded
// in the audit trail as the authorizer's refusals are: every action needs
// admin, which the admin API checks again for the user the console names
// on its call.
func (c *Console) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		perm := security.PermissionOf(r.Context())
		if perm.Covers(security.PermAdmin) {
			h.ServeHTTP(w, r)
			return
		}
		held := "no permission"
		if perm != security.PermNone {
			held = "permission " + perm.String()
		}
		why := r.URL.Path + " needs permission admin; you hold " + held + " (an admin grants more with 'baton acl grant')"
		security.RecordRefusal(r.Context(), http.StatusForbidden, "baton: console: "+why)
		rd := c.pageReads(w, r, "Not permitted")
		if rd == nil {
			return
		}
		c.render(w, http.StatusForbidden, "error", errorPage{base: c.base(rd, "Not permitted", "", false), Message: why})
	})
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Not found")
	if rd == nil {
		return
	}
	c.render(w, http.StatusNotFound, "error", errorPage{base: c.base(rd, "Not found", "", false), Message: "no page at " + r.URL.Path})
}

// statusOf is the HTTP status of a page whose read failed with err.
func statusOf(err error) int {
	switch status.Code(err) {
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.FailedPrecondition:
		return http.StatusConflict
	case codes.PermissionDenied:
		// An admin refused another's procedure (ownership): the page
		// says why.
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}
