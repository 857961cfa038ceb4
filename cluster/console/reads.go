package console

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// reads is one page's reads. They are linearizable (through this node:
// a standby forwards them to the leader) until one fails for want of a
// leader; from then on the page is read at STALE from this node alone,
// and says so.
type reads struct {
	c   *Console
	ctx context.Context
	// node is this node's own status, read first: the header's subject.
	node *adminpb.ClusterStatusResponse
	// served is the ReadInfo of the first linearizable read that carried
	// one, staleServed of the first stale one: a page that went stale
	// after some reads shows parts of both, and is described by the
	// second (source).
	served, staleServed *adminpb.ReadInfo
	stale               bool
	why                 string
	// record is the repair record the page is asked to report (a repair
	// from the console led to it), 0 if none.
	record uint64
	// perm is what the user may do (security.PermissionOf the request).
	perm security.Permission
}

// pageReads is newReads for the page titled title; without them it
// answers the failure page and returns nil.
func (c *Console) pageReads(w http.ResponseWriter, r *http.Request, title string) *reads {
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, title, err)
		return nil
	}
	return rd
}

// newReads reads this node's status; without it there is no page.
func (c *Console) newReads(r *http.Request) (*reads, error) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ReadTimeout)
	defer cancel()
	st, err := c.self.ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
	if err != nil {
		return nil, err
	}
	rd := &reads{c: c, ctx: r.Context(), node: st, perm: security.PermissionOf(r.Context())}
	if seq, err := strconv.ParseUint(r.URL.Query().Get("record"), 10, 64); err == nil {
		rd.record = seq
	}
	if st.GetLeaderId() == "" {
		// Asking would only wait for the answer no one gives.
		rd.goStale("no leader is known to " + st.GetNodeId())
	}
	return rd, nil
}

func (rd *reads) goStale(why string) {
	if !rd.stale {
		rd.stale, rd.why = true, why
	}
}

// read runs call at the page's consistency, each attempt bounded by
// Config.ReadTimeout. info extracts the answer's ReadInfo.
func read[T any](rd *reads, call func(ctx context.Context, c adminpb.Consistency) (T, error), info func(T) *adminpb.ReadInfo) (T, error) {
	attempt := func(c adminpb.Consistency) (T, error) {
		ctx, cancel := context.WithTimeout(rd.ctx, rd.c.cfg.ReadTimeout)
		defer cancel()
		v, err := call(ctx, c)
		if err == nil && info != nil {
			switch {
			case c == adminpb.Consistency_STALE && rd.staleServed == nil:
				rd.staleServed = info(v)
			case c != adminpb.Consistency_STALE && rd.served == nil:
				rd.served = info(v)
			}
		}
		return v, err
	}
	if !rd.stale {
		v, err := attempt(adminpb.Consistency_LINEARIZABLE)
		// Only an error that means no leader answered (as opposed to an
		// answer, such as NOT_FOUND) is worth making the read stale.
		if err == nil || !client.Retryable(rd.ctx, err) {
			return v, err
		}
		rd.goStale("no leader answered: " + status.Convert(err).Message())
	}
	return attempt(adminpb.Consistency_STALE)
}

// source describes the page's reads (nil: none said): its first read's
// node and index, or once it went stale, its first stale read's. A page
// that is partly stale is only as fresh as that part, which this node
// read from its own state: without a stale read that said so, this node's
// status says it.
func (rd *reads) source() *adminpb.ReadInfo {
	switch {
	case !rd.stale:
		return rd.served
	case rd.staleServed != nil:
		return rd.staleServed
	}
	return &adminpb.ReadInfo{ServedBy: rd.node.GetNodeId(), AppliedIndex: rd.node.GetAppliedIndex(), Consistency: adminpb.Consistency_STALE}
}

// staleBanner is what a stale page says of itself.
type staleBanner struct {
	Why string
	// Node and AppliedIndex: whose state the page shows, at which index.
	Node         string
	AppliedIndex uint64
	// AsOf is when Node last heard from the leader (zero: never).
	AsOf time.Time
	// LeaderID and LeaderURL: a leader some member reports, and its
	// console, if known.
	LeaderID, LeaderURL string
}

// banner describes a stale page, asking the members for a leader to link
// to: this node may not know one, while another member it reaches does.
func (rd *reads) banner() *staleBanner {
	if !rd.stale {
		return nil
	}
	src := rd.source()
	b := &staleBanner{Why: rd.why, Node: src.GetServedBy(), AppliedIndex: src.GetAppliedIndex()}
	if ms := rd.node.GetLastContactUnixMs(); ms > 0 {
		b.AsOf = time.UnixMilli(ms)
	}
	b.LeaderID, b.LeaderURL = rd.node.GetLeaderId(), rd.c.consoleURL(rd.node.GetLeaderHttpAddress())
	if b.LeaderURL != "" {
		return b
	}
	ctx, cancel := context.WithTimeout(rd.ctx, rd.c.cfg.ReadTimeout)
	defer cancel()
	ms, err := rd.c.self.ClusterStatus(ctx, &adminpb.ClusterStatusRequest{Members: true})
	if err != nil {
		return b
	}
	for _, p := range ms.GetPeers() {
		if st := p.GetStatus(); p.GetReachable() && st.GetState() == "Leader" {
			b.LeaderID, b.LeaderURL = p.GetId(), rd.c.consoleURL(p.GetHttpAddress())
			break
		}
	}
	return b
}

// consoleURL is the console's address on a member's HTTP address: https
// when the cluster runs with TLS (Config.TLS), whose HTTP ports refuse
// plaintext.
func (c *Console) consoleURL(httpAddr string) string {
	if httpAddr == "" {
		return ""
	}
	scheme := "http"
	if c.cfg.TLS {
		scheme = "https"
	}
	return scheme + "://" + httpAddr + "/"
}
