package security

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// StreamLayer is a raft.StreamLayer over mutual TLS that admits only
// masters: a region server's or a client's certificate, signed by the
// same CA, still cannot speak Raft. Without credentials
// (RaftLayerConfig.TLS nil) it is plain TCP, as raft's own.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	client    *tls.Config
	// handshakeTimeout is HandshakeTimeout (tests shorten it).
	handshakeTimeout time.Duration
}

// NewStreamLayer listens on bind; advertise (nil: the listener's address)
// is the address other masters dial. Its connections have the default
// ConnLimits.
func NewStreamLayer(bind string, advertise net.Addr, c *Credentials) (*StreamLayer, error) {
	return NewRaftStreamLayer(RaftLayerConfig{Bind: bind, Advertise: advertise, TLS: c})
}

// RaftLayerConfig configures NewRaftStreamLayer.
type RaftLayerConfig struct {
	// Bind is the address listened on; Advertise (nil: the listener's)
	// the one other masters dial.
	Bind      string
	Advertise net.Addr
	// TLS: mutual TLS admitting masters; nil, plain TCP.
	TLS *Credentials
	// Limits bound the connections accepted: the handshake (in plain
	// TCP, the first call) within HandshakeTimeout, MaxPerSource at once
	// from one address, refusals counted in Metrics (nil: not counted).
	Limits  ConnLimits
	Metrics *ListenerMetrics
	Logger  hclog.Logger
}

// NewRaftStreamLayer listens on cfg.Bind.
func NewRaftStreamLayer(cfg RaftLayerConfig) (*StreamLayer, error) {
	limits := cfg.Limits.WithDefaults()
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, err
	}
	advertise := cfg.Advertise
	if advertise == nil {
		advertise = ln.Addr()
	}
	if tcp, ok := advertise.(*net.TCPAddr); ok && (tcp.IP == nil || tcp.IP.IsUnspecified()) {
		ln.Close()
		return nil, errors.New("security: the Raft advertise address must not be unspecified (0.0.0.0)")
	}
	ln = Limit(ln, limits, "raft", cfg.Metrics, cfg.Logger)
	s := &StreamLayer{ln: ln, advertise: advertise, handshakeTimeout: limits.HandshakeTimeout}
	if cfg.TLS == nil {
		// raft reads a connection without a deadline.
		s.ln = FirstByteListener(ln, limits.HandshakeTimeout)
		return s, nil
	}
	s.server, s.client = cfg.TLS.ServerConfig(RoleMaster), cfg.TLS.ClientConfig(RoleMaster)
	return s, nil
}

// HandshakeTimeout is the default bound of a Raft connection's TLS
// handshake: raft reads a connection without a deadline, so one that
// never completes its handshake (anyone can open one, no certificate
// needed) would otherwise hold its goroutine and buffers for good.
const HandshakeTimeout = DefaultHandshakeTimeout

// Accept implements net.Listener. The handshake runs on the connection's
// first read or write, in raft's handler for it, so a slow or hostile
// dialer cannot hold up the accept loop; it must end within
// HandshakeTimeout.
func (s *StreamLayer) Accept() (net.Conn, error) {
	conn, err := s.ln.Accept()
	if err != nil || s.server == nil {
		return conn, err
	}
	return &handshakeConn{Conn: tls.Server(conn, s.server), timeout: s.handshakeTimeout}, nil
}

// handshakeConn runs the server handshake, under HandshakeTimeout, before
// its first read or write.
type handshakeConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		if c.err = c.Conn.SetDeadline(time.Now().Add(c.timeout)); c.err != nil {
			return
		}
		if c.err = c.Conn.Handshake(); c.err != nil {
			_ = c.Conn.Close()
			return
		}
		c.err = c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Close implements net.Listener.
func (s *StreamLayer) Close() error { return s.ln.Close() }

// Addr implements net.Listener: the advertised address.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer. The handshake is part of the dial,
// within timeout, so a peer that is not a master fails the dial.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.client == nil {
		return d.Dial("tcp", string(address))
	}
	return tls.DialWithDialer(d, "tcp", string(address), s.client)
}
