package security

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// HostCheck refuses HTTP requests whose Host header names another site.
// A page of another site whose name an attacker pointed at a node's
// address (DNS rebinding) is same-origin to the browser: it may read
// whatever the node answers it, /status and /debug/domain as much as the
// console, and on a plaintext node nothing else stands in its way. Only
// the Host header gives the page away, so every path of a node's HTTP
// port is behind the check, not its console alone.
type HostCheck struct {
	names map[string]bool
	log   hclog.Logger
}

// NewHostCheck admits IP addresses (a rebinding page has a name, never an
// address), "localhost", and names: host names or host:port addresses (a
// node passes its own addresses, the listening one and those it
// advertises), whose host is taken. Entries that name no host (":7072",
// "0.0.0.0:7072" adds the address, which IP addresses are anyway) are
// ignored; one that is not a host name is an error.
func NewHostCheck(log hclog.Logger, names ...string) (*HostCheck, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	h := &HostCheck{names: map[string]bool{}, log: log}
	for _, s := range names {
		name, err := HostName(s)
		if err != nil {
			return nil, err
		}
		if name != "" {
			h.names[name] = true
		}
	}
	return h, nil
}

// Allowed reports whether hostport, a request's Host, names this node. An
// empty Host (HTTP/1.0) is let through: every browser sends one.
func (h *HostCheck) Allowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := bareHost(hostport)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || h.names[host]
}

// Wrap serves next the requests whose Host names this node, and refuses
// the others with 403 (as the console always did), saying which names are
// answered to and how to add one (flag: the option that adds names).
func (h *HostCheck) Wrap(next http.Handler, flag string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.Allowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		h.log.Warn("HTTP request refused: Host is not one of this node's names", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.Error(w, fmt.Sprintf("baton: Host %q is not a name of this node: it answers to IP addresses, localhost and the names "+
			"of its own addresses, so that a page of another site whose name was pointed at it (DNS rebinding) cannot read it. "+
			"Use one of those, or add the name with %s.", r.Host, flag), http.StatusForbidden)
	})
}

// HostName is the host of a name or host:port address in the form
// HostCheck compares: lower case, without brackets or a trailing dot. It
// is "" for an address without a host (":7072"), and an error for what
// is not a host name.
func HostName(s string) (string, error) {
	host := bareHost(strings.TrimSpace(s))
	if _, err := netip.ParseAddr(host); err == nil {
		return host, nil
	}
	for _, r := range host {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '.' || r == '_') {
			return "", fmt.Errorf("%q is not a host name (letters, digits, '-', '_' and '.')", s)
		}
	}
	return host, nil
}

// bareHost is the host of a name or host:port, as compared. What has no
// number for a port stays whole ("http://x/").
func bareHost(hostport string) string {
	host := hostport
	if h, port, err := net.SplitHostPort(hostport); err == nil && strings.Trim(port, "0123456789") == "" {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
}
