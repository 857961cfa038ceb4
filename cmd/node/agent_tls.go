package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/security"
)

// agentTLS is a process's TLS material, or nothing (plaintext): every
// method of a nil or empty one returns the plaintext choice, so the wiring
// reads the same either way.
type agentTLS struct {
	creds *security.Credentials
}

// loadProcessTLS loads files as want's material (none: plaintext) and
// keeps it fresh for the process's life: reread on SIGHUP and when the
// files change. The certificate must name want.
func loadProcessTLS(ctx context.Context, files security.Files, from tlsSources, want security.Identity, logger hclog.Logger) (*agentTLS, error) {
	if !files.Enabled() {
		return &agentTLS{}, nil
	}
	// Files it cannot use are a bad command line (exit 2), not a failure
	// of the running process.
	creds, err := security.Load(files, nil, logger)
	if err != nil {
		return nil, explainTLS(err, files, from)
	}
	if got := creds.Identity(); got != want {
		return nil, usagef("%s names %s, but this process runs as %s (--tls-cert %s, from %s)", files.Cert, got, want, files.Cert, from.Cert)
	}
	creds.Watch(ctx, security.DefaultWatchInterval, nil)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				changed, err := creds.Reload()
				switch {
				case err != nil:
					logger.Error("SIGHUP: TLS material not reloaded; keeping the current one", "error", err)
				case !changed:
					logger.Info("SIGHUP: TLS files unchanged")
				}
			}
		}
	}()
	return &agentTLS{creds: creds}, nil
}

// loadAgentTLS loads a master's material: its certificate must name
// baton://master/<--id>. Plaintext beyond loopback is logged loudly.
func loadAgentTLS(ctx context.Context, cfg agentConfig, logger hclog.Logger) (*agentTLS, error) {
	if !cfg.TLS.Enabled() && cfg.Insecure {
		logger.Warn("--insecure: plaintext on every channel; anyone who reaches this node's addresses can join the cluster, call the admin API or speak Raft",
			"raft_addr", cfg.RaftAddr, "grpc_addr", cfg.GRPCAddr, "http_addr", cfg.HTTPAddr)
	}
	return loadProcessTLS(ctx, cfg.TLS, cfg.TLSFrom, security.Identity{Role: security.RoleMaster, ID: cfg.ID}, logger)
}

// dialTo is the dial options of a connection to a server of role.
func (t *agentTLS) dialTo(role security.Role) []grpc.DialOption {
	if t == nil || t.creds == nil {
		return nil
	}
	return []grpc.DialOption{t.creds.DialOption(role)}
}

// consoleDialOptions are the options of the console's connection to its
// own master: the console acts for the browser's user, which its master
// believes of a master only (by certificate, or the cluster secret).
func consoleDialOptions(t *agentTLS, clusterSecret, self string) []grpc.DialOption {
	opts := t.dialTo(security.RoleMaster)
	if clusterSecret != "" {
		// The console's own node only: its actions client follows leader
		// hints, and a hint can name any address.
		opts = append(opts, security.ClusterSecretDialOptionTo(clusterSecret, self))
	}
	return opts
}

// dialToRegionServer is the dial options of a connection to region
// server id: its certificate alone is accepted.
func (t *agentTLS) dialToRegionServer(id string) []grpc.DialOption {
	if t == nil || t.creds == nil {
		return nil
	}
	return []grpc.DialOption{t.creds.DialOptionFor(security.Identity{Role: security.RoleRegionServer, ID: id})}
}

// serverOptions is a gRPC server's TLS credentials and policy; the calls
// the policy refuses are counted in reg (security.Policy.CountDenials).
func (t *agentTLS) serverOptions(p *security.Policy, reg prometheus.Registerer) ([]grpc.ServerOption, error) {
	if t == nil || t.creds == nil {
		return nil, nil
	}
	if err := p.CountDenials(reg); err != nil {
		return nil, err
	}
	return p.ServerOptions(t.creds), nil
}

// listener wraps an HTTP listener in TLS admitting roles. The handshake
// takes a connection without a client certificate under every
// --client-auth: a kubelet's probe (scheme HTTPS) presents none. What such
// a request may reach is decided by path (certOrProbe): the probes, and
// under --client-auth token or either the paths a token opens
// (admin.Server.Authorizer).
func (t *agentTLS) listener(l net.Listener, roles ...security.Role) net.Listener {
	if t == nil || t.creds == nil {
		return l
	}
	return tls.NewListener(l, t.creds.ServerConfigCertOptional(roles...))
}

// certOrProbe refuses, under a --client-auth that wants certificates
// (cert, the default), a TLS request without one for any path but the
// probes: what the handshake itself refused before the probes needed it
// to let such connections in.
func certOrProbe(auth security.ClientAuth, next http.Handler) http.Handler {
	if auth.CertOptional() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) == 0 && !admin.ProbePath(r.URL.Path) {
			http.Error(w, "baton: "+r.URL.Path+" needs a client certificate (--tls-cert/--tls-key); only /readyz and /livez answer without one", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (t *agentTLS) scheme() string {
	if t == nil || t.creds == nil {
		return "http"
	}
	return "https"
}
