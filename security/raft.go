package security

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer is a raft.StreamLayer over mutual TLS that admits only
// masters: a region server's or a client's certificate, signed by the
// same CA, still cannot speak Raft.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	client    *tls.Config
	// handshakeTimeout is HandshakeTimeout (tests shorten it).
	handshakeTimeout time.Duration
}

// NewStreamLayer listens on bind; advertise (nil: the listener's address)
// is the address other masters dial.
func NewStreamLayer(bind string, advertise net.Addr, c *Credentials) (*StreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if tcp, ok := advertise.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("security: the Raft advertise address must not be unspecified (0.0.0.0)")
	}
	return &StreamLayer{ln: ln, advertise: advertise, server: c.ServerConfig(RoleMaster), client: c.ClientConfig(RoleMaster),
		handshakeTimeout: HandshakeTimeout}, nil
}

// HandshakeTimeout bounds a Raft connection's TLS handshake: raft reads
// a connection without a deadline, so one that never completes its
// handshake (anyone can open one, no certificate needed) would otherwise
// hold its goroutine and buffers for good.
const HandshakeTimeout = 10 * time.Second

// Accept implements net.Listener. The handshake runs on the connection's
// first read or write, in raft's handler for it, so a slow or hostile
// dialer cannot hold up the accept loop; it must end within
// HandshakeTimeout.
func (s *StreamLayer) Accept() (net.Conn, error) {
	conn, err := s.ln.Accept()
	if err != nil {
		return nil, err
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
	return tls.DialWithDialer(d, "tcp", string(address), s.client)
}
