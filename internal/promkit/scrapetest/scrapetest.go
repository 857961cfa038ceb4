// Package scrapetest checks, for any process's HTTP handler, that its
// /metrics endpoint is promkit's bounded one.
package scrapetest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/promkit"
	"github.com/baton-dev/baton/internal/testwait"
)

// BlockingCollector is a collector whose collection waits until the check
// lets it go: a scrape in progress, held.
type BlockingCollector struct {
	desc    *prometheus.Desc
	in      atomic.Int32
	release chan struct{}
}

// NewBlockingCollector returns a collector to register with the registry
// the handler under test serves, before calling CheckBounded.
func NewBlockingCollector() *BlockingCollector {
	return &BlockingCollector{desc: prometheus.NewDesc("baton_test_blocking", "A gauge whose collection waits.", nil, nil),
		release: make(chan struct{})}
}

// Describe implements prometheus.Collector.
func (c *BlockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *BlockingCollector) Collect(ch chan<- prometheus.Metric) {
	c.in.Add(1)
	<-c.release
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// CheckBounded serves h, holds promkit.MaxScrapes scrapes of its
// /metrics in bc, and checks that one more is refused at once (503) while
// those in progress complete (200).
func CheckBounded(t *testing.T, h http.Handler, bc *BlockingCollector) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	release := sync.OnceFunc(func() { close(bc.release) })
	defer release() // before the server's Close, which waits for its requests
	// A scrape the handler let through would wait for release: the
	// timeout makes that a failure, not a hang.
	client := &http.Client{Timeout: 10 * time.Second}
	scrape := func() (int, error) {
		r, err := client.Get(srv.URL + "/metrics")
		if err != nil {
			return 0, err
		}
		defer r.Body.Close()
		_, _ = io.Copy(io.Discard, r.Body)
		return r.StatusCode, nil
	}
	codes := make(chan int, promkit.MaxScrapes)
	for range promkit.MaxScrapes {
		go func() {
			code, err := scrape()
			if err != nil {
				t.Errorf("scrape: %v", err)
			}
			codes <- code
		}()
	}
	testwait.For(t, 10*time.Second, fmt.Sprintf("%d scrapes in progress", promkit.MaxScrapes), func() bool {
		return bc.in.Load() == promkit.MaxScrapes
	})
	code, err := scrape()
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("scrape beyond the bound: %d, want 503", code)
	}
	release()
	for range promkit.MaxScrapes {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("scrape in progress: %d, want 200", code)
		}
	}
}
