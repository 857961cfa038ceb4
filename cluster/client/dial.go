package client

import (
	"context"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// Liveness settings of FailoverDialOptions.
const (
	// KeepaliveTime is how long a connection may go without receiving
	// anything before gRPC pings the peer. It is gRPC's minimum: smaller
	// values are raised to it (with a warning), which is why TCP keepalive
	// probes (TCPKeepaliveIdle) are used as well.
	KeepaliveTime = 10 * time.Second
	// KeepaliveTimeout is how long an unanswered gRPC ping, or (through
	// TCP_USER_TIMEOUT, which gRPC sets to it on Linux) data the peer has
	// not acknowledged, is tolerated before the connection is closed.
	KeepaliveTimeout = time.Second
	// TCPKeepaliveIdle is the idleness after which the kernel probes the
	// peer, and the interval of the probes. With TCP_USER_TIMEOUT set
	// (above), Linux closes an idle connection to a vanished host about
	// TCPKeepaliveIdle+TCPKeepaliveIdle after the last thing it received.
	TCPKeepaliveIdle = time.Second
	// MinConnectTimeout bounds a connection attempt (gRPC's default: 20 s).
	MinConnectTimeout = time.Second
)

// FailoverDialOptions are the dial options that make a connection to a
// master notice soon that the master is gone, even when it went without
// closing its connections (a SIGKILLed container, a host that lost power:
// no TCP reset is ever sent), and reconnect quickly to one that comes back:
//
//   - gRPC keepalive: a connection idle for KeepaliveTime is pinged, with
//     or without calls in flight, and closed if the ping is not answered
//     within KeepaliveTimeout; on Linux gRPC also sets TCP_USER_TIMEOUT to
//     KeepaliveTimeout, so a call sent to a dead host closes the
//     connection about a second later;
//   - TCP keepalive probes after TCPKeepaliveIdle of idleness, so that an
//     idle connection (a watch stream waiting for news) to a dead host
//     fails within about two seconds rather than KeepaliveTime;
//   - connection attempts give up after MinConnectTimeout and are retried
//     after 50 ms, backing off up to 1 s (gRPC's defaults: 20 s, and up to
//     120 s).
//
// The servers these connections reach must allow pings this frequent
// (admin.KeepaliveEnforcement); gRPC's default policy closes the
// connection of a peer that pings more often than every 5 minutes.
//
// The options include a dialer (for the TCP keepalive settings), which
// replaces gRPC's: proxies named by the HTTPS_PROXY environment variable
// are not used. A dialer given with WithDialOptions replaces it.
//
// A Client uses them, before the options of WithDialOptions; cluster/admin
// uses them to forward calls to the leader and cluster/regionserver to reach the
// masters.
func FailoverDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithContextDialer(dialKeepalive),
		grpc.WithConnectParams(grpc.ConnectParams{
			MinConnectTimeout: MinConnectTimeout,
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		}),
	}
}

// dialKeepalive dials addr (host:port, or a unix: target as gRPC passes it
// to a custom dialer) with TCP keepalive probes every TCPKeepaliveIdle.
func dialKeepalive(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
		Enable:   true,
		Idle:     TCPKeepaliveIdle,
		Interval: TCPKeepaliveIdle,
		Count:    3, // used where TCP_USER_TIMEOUT is not
	}}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return d.DialContext(ctx, "unix", strings.TrimPrefix(path, "//"))
	}
	return d.DialContext(ctx, "tcp", addr)
}
