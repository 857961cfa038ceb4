package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// SpeaksTLS is the cause given for an address whose port speaks TLS to a
// plaintext client: gRPC alone would call it a connection closed before
// the handshake, as a hung node or another program's port would be.
const SpeaksTLS = "this port speaks TLS and this client does not (give it TLS credentials)"

// probeTimeout bounds the look-ups that find out why an address failed:
// a DNS query, a TLS handshake.
const probeTimeout = time.Second

// permanentError is an attempt's failure that waiting will not mend: a
// refused connection, a name that does not resolve, a TLS mismatch. It is
// still UNAVAILABLE, retried like any, until every address has failed so
// (FollowPolicy.Permanent). cause says it in a few words.
type permanentError struct {
	cause string
	err   error
}

func (e *permanentError) Error() string              { return e.cause }
func (e *permanentError) Unwrap() error              { return e.err }
func (e *permanentError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.cause) }

// isPermanent is FollowPolicy.Permanent for the Client.
func isPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

// classify returns err, or a permanentError saying why addr cannot be
// reached when waiting would not change it. Only the client's own
// failures to reach addr count: a master's answer (it carries a
// LeaderHint) is about the cluster, whatever it quotes.
func (c *Client) classify(ctx context.Context, addr string, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return err
	}
	for _, d := range st.Details() {
		if _, ok := d.(*adminpb.LeaderHint); ok {
			return err
		}
	}
	msg := st.Message()
	switch {
	case strings.Contains(msg, "connection refused") && c.hasAnswered(addr):
		// It answered this client before: a master restarting (or a
		// leader that just died, the others electing), worth waiting for.
		return err
	case strings.Contains(msg, "connection refused"):
		return &permanentError{"connection refused", err}
	case strings.Contains(msg, "produced zero addresses") || strings.Contains(msg, "no such host"):
		if why := c.unresolvable(ctx, addr); why != "" {
			return &permanentError{why, err}
		}
	case strings.Contains(msg, "authentication handshake failed") && (strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:")):
		return &permanentError{"TLS handshake failed: " + after(msg, "authentication handshake failed: "), err}
	case strings.Contains(msg, "remote error: tls:"):
		// TLS 1.3: the client's handshake ends before the server has
		// checked the client's certificate; its refusal comes as an alert.
		return &permanentError{"the server refused this client's TLS certificate: " + after(msg, "remote error: "), err}
	case strings.Contains(msg, "server preface") && c.speaksTLS(ctx, addr):
		return &permanentError{SpeaksTLS, err}
	}
	return err
}

// after is what follows the first sep in s, trimmed of gRPC's quotes; s
// if there is no sep.
func after(s, sep string) string {
	if _, a, ok := strings.Cut(s, sep); ok {
		s = a
	}
	return strings.TrimRight(s, `"`)
}

// unresolvable says why addr's host has no address ("" if it has some, or
// the resolver failed in a way that may pass).
func (c *Client) unresolvable(ctx context.Context, addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	var de *net.DNSError
	switch {
	case err == nil && len(addrs) == 0:
		return "the name " + host + " resolves to no address"
	case errors.As(err, &de) && de.IsNotFound:
		return "the name does not resolve: " + err.Error()
	}
	return ""
}

// speaksTLS reports whether addr answers a TLS handshake: what a port
// that closed a plaintext connection before gRPC's handshake is most
// likely to be. The answer is kept for the Client's life.
func (c *Client) speaksTLS(ctx context.Context, addr string) bool {
	c.mu.Lock()
	known, ok := c.tlsPorts[addr]
	c.mu.Unlock()
	if ok {
		return known
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	raw, err := dialKeepalive(ctx, addr)
	if err != nil {
		return false
	}
	defer raw.Close()
	// Only whether the server answers in TLS matters, not who it is: no
	// data is sent over this connection.
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe, see above
	err = conn.HandshakeContext(ctx)
	var alert tls.AlertError
	yes := err == nil || errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls:")
	if ctx.Err() == nil { // a probe cut short says nothing
		c.mu.Lock()
		c.tlsPorts[addr] = yes
		c.mu.Unlock()
	}
	return yes
}

// AwaitsLeader reports whether err is a master's own answer that it knows
// of no leader to serve the call (an election under way): what a caller
// waiting on a Client may tell its user it waits for.
func AwaitsLeader(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if h, ok := d.(*adminpb.LeaderHint); ok {
			return h.GetLeaderAdminAddress() == ""
		}
	}
	return false
}

// answeredBy reports whether err is a master's own answer (a status it
// sent), rather than the client's failure to reach it.
func answeredBy(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled {
		return true
	}
	for _, d := range st.Details() {
		if _, ok := d.(*adminpb.LeaderHint); ok {
			return true
		}
	}
	return false
}

func (c *Client) markAnswered(addr string) {
	c.mu.Lock()
	c.answered[addr] = true
	c.mu.Unlock()
}

func (c *Client) hasAnswered(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered[addr]
}
