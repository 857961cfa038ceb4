package regionserver

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/promkit"
	"github.com/baton-dev/baton/security"
)

// HTTPHandler serves the region server's HTTP endpoints (Config.HTTPAddr):
//
//	/metrics  Prometheus exposition of Config.Metrics (baton_regionserver_*
//	          and whatever the caller registered there), 4 scrapes at a
//	          time (promkit.MaxScrapes); with TLS, to masters and to
//	          clients holding read (requireRead)
//	/readyz   200 "ready: ..." while the server is registered with the
//	          masters (it holds a start code and serves its regions), else
//	          503 with the reason
//	/livez    200 "alive" while the server serves (registered or still
//	          registering: a server waiting for a master is not broken,
//	          and a restart would not bring the master back), 503 once
//	          stopped
//
// With TLS, /readyz and /livez are served also to a caller presenting no
// certificate (a kubelet's probe: HTTPS, no client certificate); every
// other path needs one, as before (probesWithoutCert).
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.stopped() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not alive: stopped")
			return
		}
		fmt.Fprintln(w, "alive")
	})
	mux.Handle("GET /metrics", s.requireRead("/metrics", promkit.Handler(s.cfg.Metrics)))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := s.ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		verdict := "ready"
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			verdict = "not ready"
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) == 0 {
			// A kubelet: the verdict only; why (the master, the start
			// code) is for certificate holders, as on a master.
			fmt.Fprintln(w, verdict)
			return
		}
		fmt.Fprintf(w, "%s: %s\n", verdict, why)
	})
	return s.probesWithoutCert(mux)
}

// probePaths are what a caller without a certificate may ask for: what
// says whether the server is up, nothing of its regions' data.
var probePaths = map[string]bool{"/readyz": true, "/livez": true}

// probesWithoutCert refuses, with TLS, a request without a client
// certificate for anything but probePaths: the listener lets such
// connections through its handshake (security.ServerConfigCertOptional)
// so that a kubelet can probe, and this keeps every other path as it was
// when the handshake refused them.
func (s *Server) probesWithoutCert(next http.Handler) http.Handler {
	if s.cfg.TLS == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probePaths[r.URL.Path] || (r.TLS != nil && len(r.TLS.PeerCertificates) > 0) {
			next.ServeHTTP(w, r)
			return
		}
		err := s.refuse(security.Identity{}, r.URL.Path, r.RemoteAddr,
			status.Error(codes.Unauthenticated, "no client certificate: without one only /readyz and /livez are served"))
		http.Error(w, "baton: "+status.Convert(err).Message(), http.StatusUnauthorized)
	})
}

// stopped says Stop has run.
func (s *Server) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase == phaseStopped
}

// ready reports whether the server serves, and why (not).
func (s *Server) ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.phase == phaseStopped:
		return false, "stopped"
	case s.phase != phaseStarted:
		return false, "not started"
	}
	s.selfFenceLocked()
	if s.startCode == 0 {
		return false, "not registered with a master (registering)"
	}
	return true, fmt.Sprintf("registered with start code %d, %d regions, highest term %d", s.startCode, len(s.regions), s.highestTerm)
}
