package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/security"
)

// connLimitFlags are the flags, common to `baton agent` and `baton
// regionserver`, that bound what a connection may hold on the process's
// ports (security.ConnLimits).
type connLimitFlags struct {
	handshake, perSource *string
}

// maxHandshakeTimeout bounds --handshake-timeout: beyond it the bound no
// longer keeps silent connections from piling up.
const maxHandshakeTimeout = 10 * time.Minute

func addConnLimitFlags(str func(name, usage string) *string) connLimitFlags {
	return connLimitFlags{
		handshake: str("handshake-timeout", fmt.Sprintf("a connection to any of this process's ports that has not finished its TLS handshake (in plaintext: "+
			"begun to speak) this long after it was accepted is closed, e.g. 5s (default %v)", security.DefaultHandshakeTimeout)),
		perSource: str("max-conns-per-source", fmt.Sprintf("connections one IP address may hold open on each port; more are closed as they arrive "+
			"and counted as baton_listener_connections_refused_total (default %d)", security.DefaultMaxConnsPerSource)),
	}
}

// parse validates the flags, naming each problem through bad; what was
// not given stays zero (the defaults).
func (f connLimitFlags) parse(bad func(format string, args ...any)) security.ConnLimits {
	var l security.ConnLimits
	if v := strings.TrimSpace(*f.handshake); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > maxHandshakeTimeout {
			bad("--handshake-timeout %q: want a duration from 100ms to %v, e.g. 10s", v, maxHandshakeTimeout)
		}
		l.HandshakeTimeout = d
	}
	if n, ok := intFlag("max-conns-per-source", *f.perSource, "a number of connections", 1, 1_000_000, bad); ok {
		l.MaxPerSource = n
	}
	return l
}
