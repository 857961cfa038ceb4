package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// TestRegionServerAccessControl runs three masters enforcing access
// control and a region server, all over mutual TLS, and checks that the
// region server judges clients as the masters do: a client certificate
// bound to nothing, and one whose read was revoked, are refused
// ListRegions and /metrics; one holding read is served; a revocation
// reaches the region server within a few heartbeats; the masters' own
// calls (opening regions) go on all along.
func TestRegionServerAccessControl(t *testing.T) {
	ctx, c, _ := tlsCluster(t, 3*time.Minute)
	rs := startRegionServers(t, ctx, c, 1, harness.RSOptions{HTTP: true})[0]
	cl := c.Client()
	createTables(t, ctx, cl, []string{"before"}, 2)

	pki := c.PKI()
	creds := func(name string) *security.Credentials {
		return loadCreds(t, issueFrom(t, pki, security.Identity{Role: security.RoleClient, ID: name}, time.Hour))
	}
	// asks calls ListRegions and GETs /metrics on the region server as
	// the holder of cr: both errors (nil when served).
	asks := func(cr *security.Credentials) (grpcErr, httpErr error) {
		cc := dial(t, rs.GRPCAddr, cr.DialOption(security.RoleRegionServer))
		defer cc.Close()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, grpcErr = rspb.NewRegionServerClient(cc).ListRegions(cctx, &rspb.ListRegionsRequest{})
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cr.ClientConfig(security.RoleRegionServer)}}
		resp, err := hc.Get("https://" + rs.HTTPAddr + "/metrics")
		if err != nil {
			return grpcErr, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			httpErr = fmt.Errorf("/metrics: %d %s", resp.StatusCode, body)
		}
		return grpcErr, httpErr
	}
	refused := func(who string, cr *security.Credentials) error {
		gerr, herr := asks(cr)
		if status.Code(gerr) != codes.PermissionDenied {
			return fmt.Errorf("%s: ListRegions answered %v, want PermissionDenied", who, gerr)
		}
		if herr == nil || !strings.Contains(herr.Error(), "403") || !strings.Contains(herr.Error(), "needs permission read") {
			return fmt.Errorf("%s: /metrics answered %v, want 403 naming the permission", who, herr)
		}
		return nil
	}
	served := func(who string, cr *security.Credentials) error {
		gerr, herr := asks(cr)
		return errors.Join(gerr, herr)
	}

	nobody := creds("nobody")
	if err := refused("an unbound certificate", nobody); err != nil {
		t.Error(err)
	}
	reader := creds("reader")
	if _, err := cl.AclGrant(ctx, "reader", "read"); err != nil {
		t.Fatal(err)
	}
	testwait.ForNil(t, 30*time.Second, "a read holder served by the region server", func() error {
		return served("reader", reader)
	})

	// A revocation is recorded once the cluster version allows it.
	if err := c.WaitClusterFormat(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AclRevoke(ctx, "reader"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	testwait.ForNil(t, 30*time.Second, "the revoked certificate refused by the region server", func() error {
		return refused("a revoked certificate", reader)
	})
	t.Logf("revocation reached the region server within %v", time.Since(revoked).Round(10*time.Millisecond))

	// The masters' calls are not the clients': regions still open there.
	createTables(t, ctx, cl, []string{"after"}, 2)
	if err := refused("an unbound certificate, at the end", nobody); err != nil {
		t.Error(err)
	}
}

// TestRegionServerRefusalsAudited: a call a region server refuses reaches
// the cluster's audit trail through its heartbeats: the caller, the
// method, the code, its address, and the region server it came through.
func TestRegionServerRefusalsAudited(t *testing.T) {
	ctx, c, _ := tlsCluster(t, 3*time.Minute)
	rs := startRegionServers(t, ctx, c, 1, harness.RSOptions{})[0]
	nobody := loadCreds(t, issueFrom(t, c.PKI(), security.Identity{Role: security.RoleClient, ID: "nobody"}, time.Hour))
	cc := dial(t, rs.GRPCAddr, nobody.DialOption(security.RoleRegionServer))
	defer cc.Close()
	// Refused PERMISSION_DENIED once the region server heard the grants
	// (UNAVAILABLE before, which is not the caller's doing).
	testwait.ForNil(t, 30*time.Second, "nobody refused ListRegions by the region server", func() error {
		_, err := rspb.NewRegionServerClient(cc).ListRegions(ctx, &rspb.ListRegionsRequest{})
		if status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("ListRegions answered %v, want PermissionDenied", err)
		}
		return nil
	})
	cl := c.Client()
	testwait.ForNil(t, 30*time.Second, "the region server's refusal in the audit trail", func() error {
		recs, _, err := cl.ListAudit(ctx, client.AuditFilter{Principal: "client/nobody"}, "", 100)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.GetMethod() == security.RegionServerService+"ListRegions" && r.GetCode() == codes.PermissionDenied.String() &&
				r.GetRefused() && r.GetVia() == "regionserver/"+rs.ID && strings.HasPrefix(r.GetPeer(), "127.0.0.1:") {
				return nil
			}
		}
		return fmt.Errorf("no record of the refusal among %v", recs)
	})
}
