package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The repairs page: the repair records (ListRepairs), oldest first as the
// API pages them. Without a page token it shows the newest records, found
// by following the pages to the end (maxRepairPages of them at most).

// repairWalkPage and maxRepairPages bound the walk to the newest records:
// a hundred thousand records at most, in a hundred reads.
const (
	repairWalkPage = 1000
	maxRepairPages = 100
)

type repairsPage struct {
	base
	Records []repairRow
	// Newest: the page shows the newest records (no page token).
	Newest bool
	// NextURL continues after the last record shown; FirstURL, NewestURL
	// go to the ends.
	NextURL, FirstURL, NewestURL string
	Error                        string
}

// repairRow is a record with its arguments in order.
type repairRow struct {
	*adminpb.RepairRecord
	Args []string
}

func toRepairRow(r *adminpb.RepairRecord) repairRow {
	row := repairRow{RepairRecord: r}
	for _, k := range slices.Sorted(maps.Keys(r.GetArgs())) {
		row.Args = append(row.Args, k+"="+r.GetArgs()[k])
	}
	return row
}

// listRepairs reads one page of records after the token.
func (rd *reads) listRepairs(token string, size int) (*adminpb.ListRepairsResponse, error) {
	return read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRepairsResponse, error) {
		return rd.c.self.ListRepairs(ctx, &adminpb.ListRepairsRequest{PageToken: token, PageSize: int32(size), Consistency: cons})
	}, readOf)
}

func (c *Console) repairs(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Repairs")
	if rd == nil {
		return
	}
	p := repairsPage{FirstURL: "/ui/repairs?after=0", NewestURL: "/ui/repairs"}
	code := http.StatusOK
	after := strings.TrimSpace(r.URL.Query().Get("after"))
	if after == "" {
		p.Newest = true
		recs, next, err := c.newestRepairs(rd)
		if err != nil {
			p.Error, code = status.Convert(err).Message(), statusOf(err)
		}
		for _, rec := range recs {
			p.Records = append(p.Records, toRepairRow(rec))
		}
		if next != "" {
			p.NextURL = "/ui/repairs?after=" + next
		}
	} else if n, perr := strconv.ParseUint(after, 10, 64); perr != nil {
		p.Error, code = fmt.Sprintf("%q is not a record number", after), http.StatusBadRequest
	} else {
		resp, err := rd.listRepairs(strconv.FormatUint(n, 10), c.cfg.PageSize)
		if err != nil {
			p.Error, code = status.Convert(err).Message(), statusOf(err)
		} else {
			for _, rec := range resp.GetRecords() {
				p.Records = append(p.Records, toRepairRow(rec))
			}
			if next := resp.GetNextPageToken(); next != "" {
				p.NextURL = "/ui/repairs?after=" + next
			}
		}
	}
	p.base = c.base(rd, "Repairs", "repairs", true)
	c.render(w, code, "repairs", p)
}

// newestRepairs follows ListRepairs' pages to the end and returns the last
// Config.PageSize records, and a page token if the walk stopped short of
// the end.
func (c *Console) newestRepairs(rd *reads) ([]*adminpb.RepairRecord, string, error) {
	var last []*adminpb.RepairRecord
	token := ""
	for range maxRepairPages {
		resp, err := rd.listRepairs(token, repairWalkPage)
		if err != nil {
			return last, "", err
		}
		last = append(last, resp.GetRecords()...)
		if n := len(last) - c.cfg.PageSize; n > 0 {
			last = slices.Delete(last, 0, n)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return last, "", nil
		}
	}
	return last, token, nil
}

// recordFlash says, on the page a repair led to, what the repair did: its
// record as the cluster holds it (the URL gives only its number, so a
// link cannot make a page claim what was not done).
func (rd *reads) recordFlash(seq uint64) *repairRow {
	resp, err := rd.listRepairs(strconv.FormatUint(seq-1, 10), 1)
	if err != nil || len(resp.GetRecords()) == 0 || resp.GetRecords()[0].GetSeq() != seq {
		if err != nil && status.Code(err) != codes.NotFound {
			rd.c.log.Debug("reading a repair record for its flash failed", "seq", seq, "error", err)
		}
		return nil
	}
	row := toRepairRow(resp.GetRecords()[0])
	return &row
}

// repairURL is the repairs page from record seq on.
func repairURL(seq uint64) string {
	return fmt.Sprintf("/ui/repairs?after=%d#repair-%d", seq-1, seq)
}
