// Package promkit is the Prometheus plumbing every Baton process shares:
// the /metrics endpoint, with one bound on concurrent scrapes so masters
// and region servers refuse excess load the same way, and the adoption of
// collectors a previous incarnation registered.
package promkit

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxScrapes bounds the /metrics requests a process serves at once; one
// more is answered 503 at once. Each scrape gathers every collector (on a
// leader, the procedure and domain counts), and the endpoint is open to
// anyone: scrapes beyond a Prometheus pair and an operator's curl or two
// are refused rather than let pile up on the CPU and the locks the process
// works with.
const MaxScrapes = 4

// Handler serves g's exposition, MaxScrapes requests at a time.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{MaxRequestsInFlight: MaxScrapes})
}

// Adopt registers c with reg and returns it, or returns the collector of
// the same description registered before (a master builds a new executor
// and dispatcher each time it becomes leader: their series go on). Any
// other registration error is kept in *errp, the first one only, and c is
// returned unregistered.
func Adopt[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if *errp == nil {
		*errp = err
	}
	return c
}
