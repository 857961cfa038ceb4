package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// procStates are the states a procedure can be listed by.
var procStates = []string{"RUNNABLE", "WAITING", "WAITING_TIMEOUT", "FAILED", "SUCCESS", "ROLLEDBACK"}

type proceduresPage struct {
	base
	States []string
	// The filters as given, to fill the form again.
	State, Type, Owner, After, Before, Order string
	RootsOnly                                bool
	Procedures                               []*adminpb.Procedure
	// NextURL continues the listing; FirstURL restarts it.
	NextURL, FirstURL string
	ListError         string
	PageSize          int
	// CancelURL asks to cancel what the filters select (when they
	// select anything less than everything).
	CancelURL string
}

// parseWhen reads a time bound: RFC 3339, a datetime-local value
// (2006-01-02T15:04, taken as UTC), or a duration meaning that long ago.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2026-01-02T15:04, RFC 3339, or a duration such as 15m for that long ago)", s)
}

func (c *Console) procedures(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	// A search by id goes straight to the procedure.
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		n, err := strconv.ParseUint(strings.TrimPrefix(id, "#"), 10, 64)
		if err == nil && n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/ui/procedures/%d", n), http.StatusSeeOther)
			return
		}
	}
	rd := c.pageReads(w, r, "Procedures")
	if rd == nil {
		return
	}
	p := proceduresPage{States: procStates, State: strings.ToUpper(strings.TrimSpace(q.Get("state"))), Type: strings.TrimSpace(q.Get("type")),
		Owner: strings.TrimSpace(q.Get("owner")), After: q.Get("after"), Before: q.Get("before"), Order: q.Get("order"),
		RootsOnly: q.Get("roots") == "1", PageSize: c.cfg.PageSize}
	if p.Order != "oldest" {
		p.Order = "newest"
	}
	var errs []string
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		errs = append(errs, fmt.Sprintf("%q is not a procedure id", id))
	}
	req := &adminpb.ListProceduresRequest{State: p.State, Type: p.Type, Owner: p.Owner, RootsOnly: p.RootsOnly,
		PageSize: int32(c.cfg.PageSize), PageToken: q.Get("page"), NewestFirst: p.Order == "newest"}
	now := time.Now()
	if t, err := parseWhen(p.After, now); err != nil {
		errs = append(errs, "submitted after: "+err.Error())
	} else if !t.IsZero() {
		req.SubmittedAfterUnixMs = t.UnixMilli()
	}
	if t, err := parseWhen(p.Before, now); err != nil {
		errs = append(errs, "submitted before: "+err.Error())
	} else if !t.IsZero() {
		req.SubmittedBeforeUnixMs = t.UnixMilli()
	}
	code := http.StatusOK
	if len(errs) > 0 {
		code = http.StatusBadRequest
	} else {
		resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListProceduresResponse, error) {
			req.Consistency = cons
			return c.self.ListProcedures(ctx, req)
		}, readOf)
		if err != nil {
			p.ListError = status.Convert(err).Message()
			if status.Code(err) == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
		} else {
			p.Procedures = resp.GetProcedures()
			if next := resp.GetNextPageToken(); next != "" {
				p.NextURL = listURL(q, next)
			}
		}
	}
	if q.Get("page") != "" {
		p.FirstURL = listURL(q, "")
	}
	p.CancelURL = cancelURL(p)
	p.base = c.base(rd, "Procedures", "procedures", false)
	p.Errors = errs
	c.render(w, code, "procedures", p)
}

// listURL is the listing of query q at page token page ("" for the first).
func listURL(q url.Values, page string) string {
	return withQuery("/ui/procedures", pageQuery(q, page, "id"))
}

// cancelURL is the confirmation page of cancelling what the page's
// filters select, "" without a filter (cancelling everything is not one).
func cancelURL(p proceduresPage) string {
	v := url.Values{}
	for k, s := range map[string]string{"type": p.Type, "state": p.State, "owner": p.Owner, "before": p.Before, "after": p.After} {
		if s = strings.TrimSpace(s); s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "/ui/procedures/cancel?" + v.Encode()
}
