package regionserver

import (
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/internal/promkit"
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
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.requireRead("/metrics", promkit.Handler(s.cfg.Metrics)))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := s.ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		fmt.Fprintf(w, "ready: %s\n", why)
	})
	return mux
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
