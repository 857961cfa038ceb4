package security

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of ConnLimits.
const (
	// DefaultHandshakeTimeout: a connection that has not finished its TLS
	// handshake (or, in plaintext, begun to speak: gRPC's preface, HTTP's
	// request line; sent Raft's first call whole) this long after it was
	// accepted is closed. Anyone may open one, with no certificate, so
	// without a bound a few thousand silent connections hold a node's
	// memory for as long as the dialer likes (gRPC's own bound is 120 s).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxConnsPerSource bounds the connections one IP address may
	// hold open on one port. Generous: a client process opens one or two,
	// a master a few to each peer; a NAT gateway in front of many clients
	// may need more.
	DefaultMaxConnsPerSource = 256
)

// ConnLimits bounds what a connection may hold on a node's ports before,
// and regardless of, proving who it is. Zero fields take the defaults.
type ConnLimits struct {
	// HandshakeTimeout is how long a new connection has to finish its TLS
	// handshake or, in plaintext, to speak first.
	HandshakeTimeout time.Duration
	// MaxPerSource is how many connections one IP address may hold open on
	// one port; more are closed as they are accepted. Negative: no cap.
	MaxPerSource int
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l ConnLimits) WithDefaults() ConnLimits {
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.MaxPerSource == 0 {
		l.MaxPerSource = DefaultMaxConnsPerSource
	}
	return l
}

// GRPCServerOptions bound a gRPC server's connections: the TLS handshake
// and the HTTP/2 preface within HandshakeTimeout (grpc.ConnectionTimeout
// covers both), and a keepalive policy. A peer pinging more often than
// every 500 ms is sent GOAWAY and dropped (client.FailoverDialOptions
// pings every 10 s, also without calls in flight); the server pings a
// connection idle for 30 s and drops it when no answer comes within 10 s,
// so a peer that vanished without closing does not hold it for good.
func (l ConnLimits) GRPCServerOptions() []grpc.ServerOption {
	l = l.WithDefaults()
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             500 * time.Millisecond,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    30 * time.Second,
			Timeout: 10 * time.Second,
		}),
	}
}

// ListenerMetrics counts the connections refused by the per-source cap,
// as baton_listener_connections_refused_total{listener}.
type ListenerMetrics struct {
	refused *prometheus.CounterVec
}

// NewListenerMetrics registers the counter in reg (nil: not registered).
func NewListenerMetrics(reg prometheus.Registerer) (*ListenerMetrics, error) {
	m := &ListenerMetrics{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_listener_connections_refused_total",
		Help: "Connections closed as they were accepted because their source address already held the most a port allows (--max-conns-per-source), by listener.",
	}, []string{"listener"})}
	if reg != nil {
		if err := reg.Register(m.refused); err != nil {
			return nil, fmt.Errorf("security: listener metrics: %w", err)
		}
	}
	return m, nil
}

// Limit wraps l so that each source address holds at most
// limits.MaxPerSource connections at once; name labels its refusals in m
// (nil: not counted). The handshake bound is the server's to apply
// (GRPCServerOptions, http.Server's ReadHeaderTimeout, StreamLayer),
// since only it knows when the handshake is over.
func Limit(l net.Listener, limits ConnLimits, name string, m *ListenerMetrics, log hclog.Logger) net.Listener {
	limits = limits.WithDefaults()
	if limits.MaxPerSource < 0 {
		return l
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ll := &limitListener{Listener: l, max: limits.MaxPerSource, open: map[string]int{}, log: log, name: name}
	if m != nil {
		ll.refused = m.refused.WithLabelValues(name)
	}
	return ll
}

type limitListener struct {
	net.Listener
	max     int
	name    string
	refused prometheus.Counter
	log     hclog.Logger

	mu   sync.Mutex
	open map[string]int
	// lastLog spaces out the log lines of refusals: a flood would
	// otherwise fill the log as fast as it is refused.
	lastLog time.Time
}

func (l *limitListener) Accept() (net.Conn, error) {
	return acceptAdmitted(l.Listener, func(c net.Conn) net.Conn {
		src := sourceOf(c)
		if !l.take(src) {
			return nil
		}
		return &limitedConn{Conn: c, release: func() { l.release(src) }}
	})
}

// acceptAdmitted accepts from l until admit takes a connection, as the
// conn to hand on; one it refuses (nil) is closed and the next awaited.
func acceptAdmitted(l net.Listener, admit func(net.Conn) net.Conn) (net.Conn, error) {
	for {
		c, err := l.Accept()
		if err != nil {
			return nil, err
		}
		if a := admit(c); a != nil {
			return a, nil
		}
		_ = c.Close()
	}
}

func (l *limitListener) take(src string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src] < l.max {
		l.open[src]++
		return true
	}
	if l.refused != nil {
		l.refused.Inc()
	}
	if now := time.Now(); now.Sub(l.lastLog) >= 10*time.Second {
		l.lastLog = now
		l.log.Warn("connection refused: its source holds the most connections allowed", "listener", l.name, "source", src, "max_per_source", l.max)
	}
	return false
}

func (l *limitListener) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// sourceOf is the IP address a connection comes from (the whole address
// when it has no port: a unix socket's).
func sourceOf(c net.Conn) string {
	a := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// FirstByteListener closes a connection that has not sent its first
// request whole within timeout of being accepted: the handshake bound of
// Raft's plaintext protocol, which reads without a deadline. A request is
// whole when the node answers it (its first write: Raft answers every
// call once it has read and served it), so a peer that sends one byte,
// or the start of a request, and then nothing is closed at the deadline
// like one that sends nothing. An InstallSnapshot (a first byte of
// raftInstallSnapshot) is the exception: the snapshot follows its header
// on the connection and takes as long as its size does, so the deadline
// is lifted at that byte; a peer could hold such a connection open, within
// the per-source cap.
func FirstByteListener(l net.Listener, timeout time.Duration) net.Listener {
	return &firstByteListener{Listener: l, timeout: timeout}
}

// raftInstallSnapshot is the first byte of hashicorp/raft's
// InstallSnapshot call (its rpcType, the third of its iota).
const raftInstallSnapshot = 2

type firstByteListener struct {
	net.Listener
	timeout time.Duration
}

func (l *firstByteListener) Accept() (net.Conn, error) {
	return acceptAdmitted(l.Listener, func(c net.Conn) net.Conn {
		if err := c.SetReadDeadline(time.Now().Add(l.timeout)); err != nil {
			return nil // closed by its peer already
		}
		return &firstByteConn{Conn: c}
	})
}

// firstByteConn lifts its read deadline once it answered its first
// request, or heard the start of an InstallSnapshot.
type firstByteConn struct {
	net.Conn
	mu    sync.Mutex
	heard bool // something was read
	done  bool // the deadline is lifted
}

func (c *firstByteConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		first := !c.heard
		c.heard = true
		c.mu.Unlock()
		if first && b[0] == raftInstallSnapshot {
			if derr := c.lift(); derr != nil && err == nil {
				err = derr
			}
		}
	}
	return n, err
}

func (c *firstByteConn) Write(b []byte) (int, error) {
	if err := c.lift(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *firstByteConn) lift() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil
	}
	c.done = true
	return c.Conn.SetReadDeadline(time.Time{})
}
