package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// adminFrom is an admin API client of addr whose connections come from
// the loopback address src (127.0.0.0/8 is all this host's), so that a
// master tells its callers apart by address as it would across a network.
func adminFrom(t *testing.T, addr, src string) adminpb.AdminClient {
	t.Helper()
	dial := func(ctx context.Context, a string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return d.DialContext(ctx, "tcp", a)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

func sleepProc() *adminpb.SubmitProcedureRequest {
	return &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1", "delay": "0s"}}
}

// auditOf lists the audit records of SubmitProcedure at addr.
func auditOf(t *testing.T, c adminpb.AdminClient) []*adminpb.AuditRecord {
	t.Helper()
	resp, err := c.ListAudit(ctxT(t), &adminpb.ListAuditRequest{Method: "SubmitProcedure", PageSize: 1000})
	if err != nil {
		t.Fatalf("audit list: %v", err)
	}
	return resp.GetRecords()
}

// TestPlaintextForgedRelayHeaders: in a plaintext cluster, a client that
// marks its calls as forwarded by a master (x-baton-forwarded) and names
// another origin (x-baton-peer) is believed in neither: the submit rate
// limit counts it as its own address, and the audit trail records that
// address and no forwarding master. (The penetration test turned 2
// allowed calls of 200 into 200 this way.)
func TestPlaintextForgedRelayHeaders(t *testing.T) {
	addr, _, _ := startDevAgent(t, "--dev-regionservers", "0", "--submit-rate", "0.001", "--submit-burst", "2",
		"--cluster-secret", "0123456789abcdef0123")
	waitLeads(t, addr)
	c := adminFrom(t, addr, "127.0.0.5")
	forged := metadata.AppendToOutgoingContext(ctxT(t), "x-baton-forwarded", "n2", "x-baton-peer", "203.0.113.7:4444",
		"x-baton-cluster-secret", "not-the-secret-at-all")
	allowed, limited := 0, 0
	for range 10 {
		_, err := c.SubmitProcedure(forged, sleepProc())
		switch {
		case err == nil:
			allowed++
		case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "127.0.0.5 exceeded"):
			limited++
		default:
			t.Fatalf("submission: %v", err)
		}
	}
	if allowed != 2 || limited != 8 {
		t.Fatalf("%d of 10 forged 'forwarded' submissions allowed, %d limited as 127.0.0.5; want 2 and 8", allowed, limited)
	}
	for _, r := range auditOf(t, c) {
		if r.GetVia() != "" || !strings.HasPrefix(r.GetPeer(), "127.0.0.5:") {
			t.Errorf("record %s (%s): via %q, peer %q; want no forwarding master and the caller's own address", r.GetId(), r.GetCode(), r.GetVia(), r.GetPeer())
		}
	}
}

// waitLeads waits until the agent at addr says it leads: a call marked
// forwarded is never forwarded again, so it would be refused before.
func waitLeads(t *testing.T, addr string) {
	t.Helper()
	testwait.ForNil(t, 60*time.Second, "the agent to lead", func() error {
		code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", addr, "--json", "--timeout", "2s")
		if code != exitOK || !strings.Contains(stdout, `"leader_admin_address": "`+addr+`"`) {
			return fmt.Errorf("exit %d: %s%s", code, stdout, stderr)
		}
		return nil
	})
}

// plainAgents starts a cluster of n plaintext agents in-process with
// extra flags and returns their admin addresses once one leads, the
// leader's first.
func plainAgents(t *testing.T, n int, extra ...string) []string {
	t.Helper()
	type agent struct{ id, raft, admin string }
	var agents []agent
	var peers []string
	for i := range n {
		a := agent{id: fmt.Sprintf("n%d", i+1), raft: testnet.FreeAddr(t), admin: testnet.FreeAddr(t)}
		agents = append(agents, a)
		peers = append(peers, a.id+"="+a.raft)
	}
	for _, a := range agents {
		args := append([]string{"agent", "--id", a.id, "--data-dir", t.TempDir(), "--raft-addr", a.raft, "--grpc-addr", a.admin,
			"--http-addr", "", "--peers", strings.Join(peers, ",")}, extra...)
		_, errb, cancel, done := runInBackground(map[string]string{}, args...)
		t.Cleanup(func() {
			cancel()
			if code := exitOf(t, done); code != exitOK {
				t.Errorf("agent %s exit %d: %s", a.id, code, errb.String())
			}
		})
	}
	var order []string
	testwait.ForNil(t, 60*time.Second, "a leader whose followers know it", func() error {
		order = nil
		for _, a := range agents {
			code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", a.admin, "--json", "--timeout", "2s")
			var st struct {
				LeaderAdminAddress string `json:"leader_admin_address"`
			}
			if code != exitOK || json.Unmarshal([]byte(stdout), &st) != nil || st.LeaderAdminAddress == "" {
				return fmt.Errorf("%s: exit %d: %s%s", a.id, code, stdout, stderr)
			}
			if len(order) == 0 {
				order = append(order, st.LeaderAdminAddress)
			} else if order[0] != st.LeaderAdminAddress {
				return fmt.Errorf("%s sees leader %s, not %s", a.id, st.LeaderAdminAddress, order[0])
			}
		}
		for _, a := range agents {
			if a.admin != order[0] {
				order = append(order, a.admin)
			}
		}
		return nil
	})
	return order
}

// TestPlaintextStandbyForwarding: a standby of a plaintext cluster given
// --cluster-secret forwards calls for its clients, each counted against
// the rate limit once, on the standby, as that client, and recorded on
// the leader with the client's address and the standby that forwarded it.
// Without the secret the leader does not believe the standby's word: it
// counts every forwarded call against the standby's own address (limited,
// not refused: a cluster of masters without the secret still works).
func TestPlaintextStandbyForwarding(t *testing.T) {
	limit := []string{"--insecure", "--submit-rate", "0.001", "--submit-burst", "2"}
	t.Run("secret", func(t *testing.T) {
		addrs := plainAgents(t, 2, append(limit, "--cluster-secret", "0123456789abcdef0123")...)
		leader, standby := addrs[0], addrs[1]
		// Three clients, two calls each: beyond a burst of 2 if the
		// leader counted them all as the standby.
		for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			c := adminFrom(t, standby, src)
			for i := range 2 {
				if _, err := c.SubmitProcedure(ctxT(t), sleepProc()); err != nil {
					t.Fatalf("%s's submission %d through the standby: %v", src, i, err)
				}
			}
		}
		recs := auditOf(t, adminFrom(t, leader, "127.0.0.1"))
		if len(recs) != 6 {
			t.Fatalf("%d audit records of submissions, want 6", len(recs))
		}
		for _, r := range recs {
			if r.GetVia() == "" || !strings.HasPrefix(r.GetPeer(), "127.0.0.") || strings.HasPrefix(r.GetPeer(), "127.0.0.1:") {
				t.Errorf("record %s: via %q, peer %q; want the standby and the client's address", r.GetId(), r.GetVia(), r.GetPeer())
			}
		}
	})
	t.Run("no secret", func(t *testing.T) {
		addrs := plainAgents(t, 2, limit...)
		standby := addrs[1]
		var errs []error
		for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
			c := adminFrom(t, standby, src)
			for range 2 {
				_, err := c.SubmitProcedure(ctxT(t), sleepProc())
				errs = append(errs, err)
			}
		}
		if errs[0] != nil || errs[1] != nil || status.Code(errs[2]) != codes.ResourceExhausted || !strings.Contains(errs[2].Error(), "127.0.0.1 exceeded") {
			t.Fatalf("submissions through a standby without the secret: %v; want 2 served, then limited as the standby's address", errs)
		}
	})
}
