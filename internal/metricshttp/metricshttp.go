// Package metricshttp is the /metrics endpoint every Baton process serves:
// Prometheus' handler with one bound on concurrent scrapes, so masters and
// region servers refuse excess load the same way.
package metricshttp

import (
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
