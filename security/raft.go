package security

import (
	"crypto/tls"
	"errors"
	"net"
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
	return &StreamLayer{ln: ln, advertise: advertise, server: c.ServerConfig(RoleMaster), client: c.ClientConfig(RoleMaster)}, nil
}

// Accept implements net.Listener. The handshake runs on the connection's
// first read, in raft's handler for it, so a slow or hostile dialer
// cannot hold up the accept loop.
func (s *StreamLayer) Accept() (net.Conn, error) {
	conn, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(conn, s.server), nil
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
