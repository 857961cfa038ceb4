package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
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
	// Newest: the page shows the newest records (no page token).
	Newest bool
	// Principal and Method filter the records.
	Principal, Method string
	// NextURL continues after the last record shown; FirstURL and
	// NewestURL go to the ends (with the filters).
	NextURL, FirstURL, NewestURL string
	Error                        string
}

func (rd *reads) listAudit(token, principal, method string, size int) (*adminpb.ListAuditResponse, error) {
	return read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListAuditResponse, error) {
		return rd.c.self.ListAudit(ctx, &adminpb.ListAuditRequest{PageToken: token, PageSize: int32(size), Consistency: cons, Principal: principal, Method: method})
	}, readOf)
}

func auditURL(principal, method, after string) string {
	q := url.Values{}
	if principal != "" {
		q.Set("principal", principal)
	}
	if method != "" {
		q.Set("method", method)
	}
	if after != "" {
		q.Set("after", after)
	}
	if len(q) == 0 {
		return "/ui/audit"
	}
	return "/ui/audit?" + q.Encode()
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, "Audit", err)
		return
	}
	q := r.URL.Query()
	p := auditPage{Principal: strings.TrimSpace(q.Get("principal")), Method: strings.TrimSpace(q.Get("method"))}
	p.FirstURL, p.NewestURL = auditURL(p.Principal, p.Method, "-"), auditURL(p.Principal, p.Method, "")
	code := http.StatusOK
	after := strings.TrimSpace(q.Get("after"))
	var next string
	if after == "" {
		p.Newest = true
		token := ""
		for range maxRepairPages {
			resp, err := rd.listAudit(token, p.Principal, p.Method, repairWalkPage)
			if err != nil {
				p.Error, code = status.Convert(err).Message(), statusOf(err)
				break
			}
			p.Records = append(p.Records, resp.GetRecords()...)
			if n := len(p.Records) - c.cfg.PageSize; n > 0 {
				p.Records = slices.Delete(p.Records, 0, n)
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		next = token
	} else {
		if after == "-" {
			after = ""
		}
		resp, err := rd.listAudit(after, p.Principal, p.Method, c.cfg.PageSize)
		if err != nil {
			p.Error, code = status.Convert(err).Message(), statusOf(err)
		} else {
			p.Records, next = resp.GetRecords(), resp.GetNextPageToken()
		}
	}
	if next != "" {
		p.NextURL = auditURL(p.Principal, p.Method, next)
	}
	p.base = c.base(rd, "Audit", "audit", true)
	c.render(w, code, "audit", p)
}
