package main

import (
	"context"
	"fmt"
	"github.com/baton-dev/baton/security"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

var rsUsage = `usage: baton rs <command> [flags]

commands:
  list [--page-size N] [--page-token T | --all]
                    the region servers: address, the version each registered
                    with, lease state (live, suspect, expired, or
                    unconfirmed: not heard from by this leader yet), region
                    count, last lease renewal, last heartbeat; the first
                    page (1000), or --all
  regions SERVER [--direct ADDR]
                    the regions a server hosts by its own answer, beside those
                    the master assigns to it; --direct asks the region server
                    at ADDR itself, for when the masters cannot reach it
  recover SERVER [--override] --yes [--wait]
                    reassign the regions of a dead server (a crash procedure
                    for each dead incarnation holding regions); a live server
                    needs --override: it is expired first, and its regions
                    move once it has provably stopped serving them
` + fmt.Sprintf(clientFlagsNote, "rs")

var rsAdvice = map[codes.Code]string{
	codes.InvalidArgument: invalidAdvice,
	codes.NotFound:        "list the region servers with 'baton rs list'",
	// The master answers so when it cannot reach the region server.
	codes.FailedPrecondition: "the master could not ask the region server: check that it runs ('baton rs list' shows its lease)",
}

func init() {
	topLevel.add(topCommand{
		name: "rs", rank: 80, run: (*cli).rs,
		summary: `list (lease state, region count, last heartbeat),
regions SERVER [--direct ADDR], recover SERVER`,
	})
}

func (c *cli) rs(args []string) int {
	return c.subcommands("rs", rsUsage, args, map[string]func([]string) int{
		"list":    c.rsList,
		"regions": c.rsRegions,
		"recover": c.rsRecover,
	})
}

// serverJSON is the JSON shape of a region server.
type serverJSON struct {
	ID            string `json:"id"`
	Address       string `json:"address"`
	StartCode     uint64 `json:"start_code"`
	LeaseState    string `json:"lease_state"`
	LastRenewalAt string `json:"last_renewal_at"`
	RegionCount   int32  `json:"region_count"`
	// LastHeartbeatAgeMs is null while the leader has not heard from the
	// server.
	LastHeartbeatAgeMs *int64 `json:"last_heartbeat_age_ms"`
	// Version and MaxFormat are the binary the server registered with, ""
	// and 0 when it said none (0.1.0), as cluster status --json shows a
	// member without a report.
	Version   string `json:"version"`
	MaxFormat uint32 `json:"max_format"`
}

// serversJSON is the --json document of rs list.
type serversJSON struct {
	Servers       []serverJSON `json:"servers"`
	NextPageToken string       `json:"next_page_token,omitempty"`
	Read          *readJSON    `json:"read,omitempty"`
}

func toServerJSON(s *adminpb.Server) serverJSON {
	j := serverJSON{ID: s.GetId(), Address: s.GetAddress(), StartCode: s.GetStartCode(),
		LeaseState: s.GetLeaseState(), LastRenewalAt: msTime(s.GetLastRenewalUnixMs()), RegionCount: s.GetRegionCount(),
		Version: s.GetVersion(), MaxFormat: s.GetMaxFormat()}
	if s.GetHeartbeatSeen() {
		age := s.GetLastHeartbeatAgeMs()
		j.LastHeartbeatAgeMs = &age
	}
	return j
}

func (c *cli) rsList(args []string) int {
	e := c.command("rs list", "[--page-size N] [--page-token T | --all] [--stale]", rsAdvice)
	_, pf, rf := e.listFlags("region servers", catalog.DefaultServerPageSize, catalog.MaxServerPageSize, "")
	if code, ok := e.parseList(args, pf); !ok {
		return code
	}
	return e.withClient(func(cl *client.Client) int {
		req := &adminpb.ListServersRequest{PageSize: int32(pf.size)}
		fetch := func(token string) ([]*adminpb.Server, string, error) {
			req.PageToken = token
			r, err := cl.ListServersPage(c.ctx, req, rf.opts()...)
			return r.GetServers(), r.GetNextPageToken(), err
		}
		now := time.Now()
		show := showRows(c.stdout, []string{"ID", "ADDRESS", "START CODE", "VERSION", "LEASE", "REGIONS", "LAST RENEWAL", "LAST HEARTBEAT"}, func(s *adminpb.Server) []string {
			return []string{s.GetId(), s.GetAddress(), strconv.FormatUint(s.GetStartCode(), 10), serverBinary(s), s.GetLeaseState(),
				strconv.Itoa(int(s.GetRegionCount())), renewalAge(now, s.GetLastRenewalUnixMs()), heartbeatAge(s)}
		})
		return listPages(e, pf, rf, pagedList[*adminpb.Server]{
			cmd: "rs list", noun: "region servers", key: "servers",
			fetch: fetch, show: show, tail: c.servedTail(rf, "no region servers (start one with 'baton regionserver')"),
			toJSON: func(s *adminpb.Server) any { return toServerJSON(s) },
			pageJSON: func(servers []*adminpb.Server, next string) any {
				doc := serversJSON{Servers: []serverJSON{}, NextPageToken: next, Read: toReadJSON(rf.served)}
				for _, s := range servers {
					doc.Servers = append(doc.Servers, toServerJSON(s))
				}
				return doc
			},
		})
	})
}

// serverBinary spells the binary a region server registered with as
// cluster status spells a member's report: "0.2.0 (format 2)", or "not
// reported (format 1)" for one that said none (0.1.0, or registered by a
// 0.1.0 leader).
func serverBinary(s *adminpb.Server) string {
	if s.GetMaxFormat() == 0 {
		return "not reported (format 1)"
	}
	return fmt.Sprintf("%s (format %d)", s.GetVersion(), s.GetMaxFormat())
}

// renewalAge says how long ago a lease was renewed: "1.2s ago".
func renewalAge(now time.Time, ms int64) string {
	if ms == 0 {
		return "-"
	}
	age := max(now.Sub(time.UnixMilli(ms)), 0)
	return age.Round(100*time.Millisecond).String() + " ago"
}

// heartbeatAge says how long ago the leader heard from a server: "1.2s
// ago", or "never (this leader)" since a new leader knows nothing of the
// heartbeats its predecessor received; a stale answer without a leader
// knows of none.
func heartbeatAge(s *adminpb.Server) string {
	if s.GetLeaseState() == client.LeaseUnknown {
		return "unknown (no leader)"
	}
	if !s.GetHeartbeatSeen() {
		return "never (this leader)"
	}
	return (time.Duration(s.GetLastHeartbeatAgeMs()) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
}

// serverRegionsJSON is the --json document of rs regions.
type serverRegionsJSON struct {
	Server string   `json:"server"`
	Hosted []string `json:"hosted"`
	// Assigned is null with --direct when no master answered.
	Assigned []string  `json:"assigned"`
	Read     *readJSON `json:"read,omitempty"`
	// With --direct: the address asked, the incarnation that answered,
	// and why the masters' side is missing, if it is.
	Direct       string `json:"direct,omitempty"`
	StartCode    uint64 `json:"start_code,omitempty"`
	MastersError string `json:"masters_error,omitempty"`
}

// rsRegions shows both answers and exits 0 even when they differ: a
// difference is normal while regions move, and telling it apart from a
// lasting one is for the reader (or a test) to do.
func (c *cli) rsRegions(args []string) int {
	e := c.command("rs regions", "SERVER [--direct ADDR] [--stale]", rsAdvice)
	rf := addReadFlags(e.fs)
	direct := e.fs.String("direct", "", "ask the region server at this gRPC address (host:port) itself, and the masters only for what they assign it")
	pos, code, ok := e.parse(args, 1, "region SERVER (as 'baton rs list' names it)")
	if !ok {
		return code
	}
	if *direct != "" {
		return c.rsRegionsDirect(e, rf, pos[0], strings.TrimSpace(*direct))
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		r, err := cl.ServerRegions(c.ctx, pos[0], rf.opts()...)
		hosted, assigned := slices.Sorted(slices.Values(r.GetHosted())), slices.Sorted(slices.Values(r.GetAssigned()))
		return serverRegionsJSON{Server: r.GetServer(), Hosted: append([]string{}, hosted...), Assigned: append([]string{}, assigned...), Read: toReadJSON(r.GetRead())}, func() {
			c.printServerRegions(r.GetServer(), hosted, assigned)
			c.printServed(r.GetRead())
		}, err
	})
}

// rsRegionsDirect is rs regions --direct: the region server's answer is
// the command's; the masters' assignment is added when one answers, so
// that a server the masters cannot reach (or masters that are down) still
// shows what it serves.
func (c *cli) rsRegionsDirect(e *command, rf *readFlags, server, addr string) int {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return e.fail(usagef("--direct %q: want host:port, the region server's --grpc-addr", addr))
	}
	if e.cf.timeout <= 0 {
		return e.fail(usagef("--timeout %v must be positive", e.cf.timeout))
	}
	opts, err := e.cf.dialOptionsFor(security.Identity{Role: security.RoleRegionServer, ID: server})
	if err != nil {
		return e.fail(err)
	}
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		return e.fail(usagef("--direct %q: %v", addr, err))
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(c.ctx, e.cf.timeout)
	defer cancel()
	resp, err := rspb.ListAllRegions(ctx, rspb.NewRegionServerClient(cc))
	if err != nil {
		st := status.Convert(err)
		e.advise = maps.Clone(e.advise)
		for _, code := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded} {
			e.advise[code] = "check that the region server runs and that --direct names its --grpc-addr"
		}
		return e.fail(status.Errorf(st.Code(), "region server at %s: %s", addr, st.Message()))
	}
	if resp.GetServerId() != server {
		return e.fail(status.Errorf(codes.NotFound, "%s is region server %q, not %q", addr, resp.GetServerId(), server))
	}
	hosted := []string{}
	for _, h := range resp.GetRegions() {
		hosted = append(hosted, h.GetRegion())
	}
	slices.Sort(hosted)
	doc := serverRegionsJSON{Server: server, Hosted: hosted, Direct: addr, StartCode: resp.GetStartCode()}
	cl, err := e.client()
	if err == nil {
		defer cl.Close()
		// The masters filter by server: only this server's regions come.
		assigned := []string{}
		for r, rerr := range cl.Regions(c.ctx, &adminpb.ListRegionsRequest{Server: server}, rf.opts()...) {
			if rerr != nil {
				err = rerr
				break
			}
			assigned = append(assigned, r.GetName())
		}
		if err == nil {
			doc.Assigned = assigned
			slices.Sort(doc.Assigned)
			doc.Read = toReadJSON(rf.served)
		}
	}
	if err != nil {
		doc.MastersError = status.Convert(err).Message()
	}
	if e.cf.json {
		c.printJSON(doc)
		return exitOK
	}
	if doc.Assigned == nil {
		fmt.Fprintf(c.stdout, "region server %s (start code %d, asked at %s) hosts %s by its own answer; no master answered: %s\n",
			server, resp.GetStartCode(), addr, regionsN(len(hosted)), doc.MastersError)
		for _, r := range hosted {
			fmt.Fprintf(c.stdout, "  %s\n", r)
		}
		return exitOK
	}
	fmt.Fprintf(c.stdout, "(asked region server %s at %s directly, start code %d)\n", server, addr, resp.GetStartCode())
	c.printServerRegions(server, hosted, doc.Assigned)
	c.printServed(rf.served)
	return exitOK
}

func (c *cli) printServerRegions(server string, hosted, assigned []string) {
	fmt.Fprintf(c.stdout, "region server %s hosts %s by its own answer; the master assigns it %s\n", server, regionsN(len(hosted)), regionsN(len(assigned)))
	all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(hosted), assigned...))))
	if len(all) == 0 {
		return
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	var onlyHosted, onlyAssigned int
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tHOSTED\tASSIGNED")
	for _, r := range all {
		h, a := slices.Contains(hosted, r), slices.Contains(assigned, r)
		if h && !a {
			onlyHosted++
		}
		if a && !h {
			onlyAssigned++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r, yes(h), yes(a))
	}
	tw.Flush()
	if onlyHosted+onlyAssigned > 0 {
		fmt.Fprintf(c.stdout, "\nthe answers differ: %d only hosted, %d only assigned (normal for regions in transition; run again to see whether it lasts)\n",
			onlyHosted, onlyAssigned)
	}
}

// regionsN is "1 region" or "n regions".
func regionsN(n int) string {
	if n == 1 {
		return "1 region"
	}
	return fmt.Sprintf("%d regions", n)
}
