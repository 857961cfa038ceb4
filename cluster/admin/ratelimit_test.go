package admin

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// tlsCaller is a call context from a TLS peer whose certificate names id.
func tlsCaller(id security.Identity) context.Context {
	return security.WithTestPeer(context.Background(), &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 5555}, id)
}

func plainCaller(addr string) context.Context {
	a, _ := net.ResolveTCPAddr("tcp", addr)
	return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
}

func TestSubmitRateLimit(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e6, 0))
	reg := prometheus.NewRegistry()
	l, err := newRateLimiter(RateLimit{Rate: 2, Burst: 2, Clock: clk}, reg)
	if err != nil || l == nil {
		t.Fatalf("limiter: %v, %v", l, err)
	}
	ic := l.intercept
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	call := func(ctx context.Context, method string) error {
		_, err := ic(ctx, nil, &grpc.UnaryServerInfo{FullMethod: security.AdminService + method}, ok)
		return err
	}
	alice := tlsCaller(security.Identity{Role: security.RoleClient, ID: "alice"})
	bob := tlsCaller(security.Identity{Role: security.RoleClient, ID: "bob"})
	master := forwardedFrom(tlsCaller(security.Identity{Role: security.RoleMaster, ID: "n2"}))
	console := tlsCaller(security.Identity{Role: security.RoleMaster, ID: "n1"})

	for i := range 2 {
		if err := call(alice, "SubmitProcedure"); err != nil {
			t.Fatalf("alice's call %d within the burst: %v", i, err)
		}
	}
	err = call(alice, "CreateTable")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "baton://client/alice") || !strings.Contains(err.Error(), "500ms") {
		t.Fatalf("alice's third call: %v; want RESOURCE_EXHAUSTED naming her and the wait", err)
	}
	if err := call(alice, "ListTables"); err != nil {
		t.Errorf("a read is not limited: %v", err)
	}
	if err := call(bob, "SubmitProcedure"); err != nil {
		t.Errorf("bob has his own bucket: %v", err)
	}
	for range 10 {
		if err := call(master, "SubmitProcedure"); err != nil {
			t.Fatalf("a master forwarding is not limited: %v", err)
		}
	}
	// A master calling for itself (its console, for a user) is limited.
	for range 2 {
		if err := call(console, "CancelProcedures"); err != nil {
			t.Fatal(err)
		}
	}
	if err := call(console, "CancelProcedures"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a master's own calls past the burst: %v, want limited", err)
	}
	// The console of a master, acting for alice: her bucket, empty now.
	forAlice := metadata.NewIncomingContext(tlsCaller(security.Identity{Role: security.RoleMaster, ID: "n3"}),
		metadata.Pairs(security.OnBehalfKey, "baton://client/alice"))
	if err := call(forAlice, "CancelProcedures"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "baton://client/alice") {
		t.Errorf("a console call for alice, whose bucket is empty: %v, want limited as alice", err)
	}
	// Only a master's word is taken: a client naming someone else is
	// still itself.
	bobForAlice := metadata.NewIncomingContext(tlsCaller(security.Identity{Role: security.RoleClient, ID: "bob"}),
		metadata.Pairs(security.OnBehalfKey, "baton://client/alice"))
	if err := call(bobForAlice, "CancelProcedures"); err != nil {
		t.Errorf("bob's second call, within his burst, though he names alice: %v", err)
	}
	if err := call(bobForAlice, "CancelProcedures"); err == nil || !strings.Contains(err.Error(), "baton://client/bob") {
		t.Errorf("bob's third call: %v, want limited as bob", err)
	}
	// A dry run starts nothing: never counted.
	for range 5 {
		if _, err := ic(alice, &adminpb.CancelProceduresRequest{DryRun: true}, &grpc.UnaryServerInfo{FullMethod: security.AdminService + "CancelProcedures"}, ok); err != nil {
			t.Fatalf("a dry run while limited: %v", err)
		}
	}
	// Without TLS, a call forwarded by a standby that proved itself a
	// master (the cluster secret) is counted there, not again on the
	// leader as the standby's address.
	fwd := context.WithValue(forwardedFrom(plainCaller("127.0.0.1:9000")), relayProvenKey{}, true)
	for range 5 {
		if err := call(fwd, "SubmitProcedure"); err != nil {
			t.Fatalf("a forwarded plaintext call: %v", err)
		}
	}
	// Without the secret, the mark is anyone's: the caller is its address.
	forged := forwardedFrom(plainCaller("127.0.0.2:9000"))
	for range 2 {
		if err := call(forged, "SubmitProcedure"); err != nil {
			t.Fatalf("a plaintext call within its burst: %v", err)
		}
	}
	if err := call(forged, "SubmitProcedure"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "127.0.0.2 exceeded") {
		t.Fatalf("a plaintext call marked forwarded without the cluster secret, past its burst: %v, want limited as its address", err)
	}
	clk.Advance(500 * time.Millisecond)
	if err := call(alice, "SubmitProcedure"); err != nil {
		t.Errorf("after 500 ms at 2/s: %v", err)
	}
	if err := call(alice, "SubmitProcedure"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the token earned is spent: %v", err)
	}
	// Without TLS, callers are told apart by IP address only.
	p1, p2 := plainCaller("10.1.1.1:1000"), plainCaller("10.1.1.1:2000")
	if call(p1, "DeleteTable") != nil || call(p2, "DeleteTable") != nil {
		t.Fatal("plaintext burst refused")
	}
	if err := call(plainCaller("10.1.1.1:3000"), "DeleteTable"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third port of the same address: %v, want limited", err)
	}
	if got := testutil.ToFloat64(l.limited.WithLabelValues(security.AdminService + "CreateTable")); got != 1 {
		t.Errorf("rate-limited CreateTable counted %v, want 1", got)
	}
}

// forwardedFrom marks ctx as a call a standby forwarded.
func forwardedFrom(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(forwardedKey, "n2"))
}

func TestSubmitRateLimitConfig(t *testing.T) {
	if ic, err := RateLimitInterceptor(RateLimit{}, nil); ic != nil || err != nil {
		t.Errorf("rate 0: %v, %v; want no interceptor", ic, err)
	}
	for _, bad := range []RateLimit{{Rate: -1}, {Rate: 1, Burst: -1}, {Rate: 1e-10}, {Rate: 1e19}, {Rate: 1, Burst: 1e7}} {
		if _, err := RateLimitInterceptor(bad, nil); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestSubmitRateLimitBoundsItsCallers: the buckets kept stay within
// MaxCallers however many callers come.
func TestSubmitRateLimitBoundsItsCallers(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e6, 0))
	l, err := newRateLimiter(RateLimit{Rate: 1, Burst: 1, MaxCallers: 10, Clock: clk}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.intercept
	for i := range 100 {
		clk.Advance(time.Millisecond)
		ctx := tlsCaller(security.Identity{Role: security.RoleClient, ID: "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
		_, _ = ic(ctx, nil, &grpc.UnaryServerInfo{FullMethod: security.AdminService + "SubmitProcedure"},
			func(context.Context, any) (any, error) { return nil, nil })
		l.mu.Lock()
		n := len(l.buckets)
		l.mu.Unlock()
		if n > 10 {
			t.Fatalf("%d buckets after %d callers, want at most 10", n, i+1)
		}
	}
}
