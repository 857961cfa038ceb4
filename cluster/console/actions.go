package console

import (
	"context"
	"fmt"
	"github.com/baton-dev/baton/security"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// actionTimeout bounds an action's call: long enough to follow a leader
// change (the client retries at the new leader), short enough to answer.
const actionTimeout = 15 * time.Second

// confirmPage asks to confirm an action on a procedure, and says why an
// attempt failed.
type confirmPage struct {
	base
	P *adminpb.Procedure
	// Action is the action's name in the URL (abort); Verb and Effect say
	// what it does.
	Action, Verb, Effect string
	Message              string
}

// abortEffect says what an abort does, on its confirmation page.
const abortEffect = "The procedure stops before its next step and every step it executed is rolled back, " +
	"newest first, across its whole tree (its root and every child). It ends ROLLEDBACK. " +
	"A procedure that cannot be aborted (one that retries until done) refuses."

func (c *Console) abortConfirm(w http.ResponseWriter, r *http.Request) {
	c.confirm(w, r, http.StatusOK, "")
}

// confirm shows the abort's confirmation page for the procedure in the
// path, with message (an earlier attempt's failure) if any.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, code int, message string) {
	rd, id, proc := c.procPage(w, r, "Abort", "Abort procedure")
	if rd == nil {
		return
	}
	p := confirmPage{P: proc, Action: "abort", Verb: "Abort", Effect: abortEffect, Message: message}
	if client.Terminal(proc.GetState()) && message == "" {
		p.Message = fmt.Sprintf("Procedure %d is already %s: there is nothing to abort.", id, proc.GetState())
	}
	p.base = c.base(rd, "Abort procedure "+strconv.FormatUint(id, 10), "procedures", false)
	c.render(w, code, "confirm", p)
}

// abort is the POST of the abort's confirmation form: it aborts only with
// confirm=yes, else it asks again.
func (c *Console) abort(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("confirm") != "yes" {
		c.confirm(w, r, http.StatusBadRequest, "Not aborted: tick the box to confirm the abort.")
		return
	}
	ctx, cancel := context.WithTimeout(forUser(r), actionTimeout)
	defer cancel()
	var act []client.ActOption
	if r.PostForm.Get("force") == "yes" {
		// Another's procedure: the admin API decides whether this user may.
		act = append(act, client.Force())
	}
	if _, err := c.actions.Abort(ctx, id, act...); err != nil {
		code := statusOf(err)
		c.log.Warn("abort from the console failed", "id", id, "error", err)
		c.confirm(w, r, code, "Not aborted: "+status.Convert(err).Message())
		return
	}
	c.log.Info("procedure aborted from the console", "id", id, "remote", r.RemoteAddr)
	http.Redirect(w, r, fmt.Sprintf("/ui/procedures/%d?done=abort", id), http.StatusSeeOther)
}

// forUser is r's context, naming on the console's call who asked: the
// bearer token the request carried, or else the identity of the
// certificate the browser presented (security.OnBehalfOf), and the
// browser's address (security.FromPeer). The admin API judges the call on
// that user's permission, records it in the audit trail as theirs, and
// counts it against their submit rate limit; it takes a master's word for
// all of it only.
func forUser(r *http.Request) context.Context {
	ctx := security.FromPeer(r.Context(), r.RemoteAddr)
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return security.WithToken(ctx, strings.TrimSpace(tok))
	}
	if r.TLS == nil {
		return ctx
	}
	id, err := security.PeerIdentity(*r.TLS)
	if err != nil {
		return ctx
	}
	return security.OnBehalfOf(ctx, id)
}
