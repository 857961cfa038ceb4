package client

import (
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Conns holds one connection per address, made on first use: a Client's
// to the masters' admin API, a region server's to their Master service.
// Each fails fast on a dead node (also one that vanished without closing
// its connections) and reconnects quickly to one that comes back
// (FailoverDialOptions). It is safe for concurrent use.
type Conns struct {
	closedMsg, addrPrefix string
	dialOpts              []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewConns returns an empty Conns whose connections take dialOpts after
// the failover options (TLS credentials go here). Its errors are
// closedMsg after Close, and addrPrefix+addr+": "+why for an address it
// cannot dial.
func NewConns(closedMsg, addrPrefix string, dialOpts ...grpc.DialOption) *Conns {
	return &Conns{closedMsg: closedMsg, addrPrefix: addrPrefix, dialOpts: dialOpts, conns: map[string]*grpc.ClientConn{}}
}

// Get returns the connection to addr, CANCELED after Close. A malformed
// address is UNAVAILABLE: as unreachable as a dead node.
func (p *Conns) Get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, status.Error(codes.Canceled, p.closedMsg)
	}
	cc := p.conns[addr]
	if cc == nil {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, FailoverDialOptions()...)
		var err error
		cc, err = grpc.NewClient(addr, append(opts, p.dialOpts...)...)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "%s%s: %v", p.addrPrefix, addr, err)
		}
		p.conns[addr] = cc
	}
	return cc, nil
}

// Close closes the connections; Get fails from then on.
func (p *Conns) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for a, cc := range p.conns {
		errs = append(errs, cc.Close())
		delete(p.conns, a)
	}
	return errors.Join(errs...)
}
