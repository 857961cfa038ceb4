package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/otelenv"
)

// processMetrics is a process's registry: the Go runtime's and the
// process's collectors, to which the node or region server adds its own.
func processMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// tracing is a process's OpenTelemetry tracer provider, built from the
// OTEL_* environment (internal/otelenv); tp is nil when tracing is off.
type tracing struct {
	tp       *sdktrace.TracerProvider
	protocol string
	stop     func(context.Context) error
	once     sync.Once
	log      hclog.Logger
}

// errorHandlerOnce routes the SDK's errors (a collector that does not
// answer) to the first logger that asks: OpenTelemetry's error handler is
// process-wide, and a process runs one agent or one region server.
var errorHandlerOnce sync.Once

// startTracing builds the tracer provider the environment asks for, with
// service (overridden by OTEL_SERVICE_NAME) and the node's id as instance.
func startTracing(ctx context.Context, service, instance string, logger hclog.Logger) (*tracing, error) {
	protocol, err := otelenv.Enabled(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	tp, stop, err := otelenv.TracerProvider(ctx, os.Getenv, otelenv.Resource{ServiceName: service, InstanceID: instance})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	t := &tracing{tp: tp, protocol: protocol, stop: stop, log: logger}
	if tp != nil {
		errorHandlerOnce.Do(func() {
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
				logger.Warn("OpenTelemetry", "error", err)
			}))
		})
		logger.Info("tracing on: spans go to the OTLP exporter", "protocol", protocol)
	}
	return t, nil
}

// provider is the tracer provider to hand to Baton's packages: a nil
// interface when tracing is off (never a nil pointer in an interface).
func (t *tracing) provider() trace.TracerProvider {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp
}

// flush exports the spans still buffered and stops the provider, within
// ctx; later calls do nothing.
func (t *tracing) flush(ctx context.Context) {
	if t == nil {
		return
	}
	t.once.Do(func() {
		if err := t.stop(ctx); err != nil {
			t.log.Warn("flushing traces", "error", err)
		}
	})
}

// shutdown is flush with a bound of its own, for deferred calls.
func (t *tracing) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	t.flush(ctx)
}
