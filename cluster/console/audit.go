package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The audit page: the audit trail (ListAudit), oldest first as the API
// pages it; without a page token, the newest records, found by following
// the pages to the end (as the repairs page does). Admin only, as the
// API is.

type auditPage struct {
	base
	Records []*adminpb.AuditRecord
	// Newest: the page lists newest first (the default); else oldest
	// first, from the first record.
	Newest bool
	// Principal and Method filter the records.
	Principal, Method string
	// NextURL continues the listing in its order; FirstURL and NewestURL
	// start it at either end (with the filters).
	NextURL, FirstURL, NewestURL string
	Error                        string
}

func (rd *reads) listAudit(token, principal, method string, size int, newest bool) (*adminpb.ListAuditResponse, error) {
	return read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListAuditResponse, error) {
		return rd.c.self.ListAudit(ctx, &adminpb.ListAuditRequest{PageToken: token, PageSize: int32(size), Consistency: cons,
			Principal: principal, Method: method, NewestFirst: newest})
	}, readOf)
}

// auditURL is the audit page with the filters, listing oldest first from
// after ("-": the first record) or, without after, newest first from
// before ("": the newest).
func auditURL(principal, method, after, before string) string {
	q := url.Values{}
	if principal != "" {
		q.Set("principal", principal)
	}
	if method != "" {
		q.Set("method", method)
	}
	if after != "" {
		q.Set("after", after)
	} else if before != "" {
		q.Set("before", before)
	}
	if len(q) == 0 {
		return "/ui/audit"
	}
	return "/ui/audit?" + q.Encode()
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Audit")
	if rd == nil {
		return
	}
	q := r.URL.Query()
	p := auditPage{Principal: strings.TrimSpace(q.Get("principal")), Method: strings.TrimSpace(q.Get("method"))}
	p.FirstURL, p.NewestURL = auditURL(p.Principal, p.Method, "-", ""), auditURL(p.Principal, p.Method, "", "")
	after := strings.TrimSpace(q.Get("after"))
	p.Newest = after == ""
	token := strings.TrimSpace(q.Get("before"))
	if !p.Newest {
		token = strings.TrimPrefix(after, "-")
	}
	code := http.StatusOK
	resp, err := rd.listAudit(token, p.Principal, p.Method, c.cfg.PageSize, p.Newest)
	if err != nil {
		p.Error, code = status.Convert(err).Message(), statusOf(err)
	} else {
		p.Records = resp.GetRecords()
		if next := resp.GetNextPageToken(); next != "" {
			if p.Newest {
				p.NextURL = auditURL(p.Principal, p.Method, "", next)
			} else {
				p.NextURL = auditURL(p.Principal, p.Method, next, "")
			}
		}
	}
	p.base = c.base(rd, "Audit", "audit", true)
	c.render(w, code, "audit", p)
}
