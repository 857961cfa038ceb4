// Package otelenv builds the OpenTelemetry tracer provider of a Baton
// process from the standard OTEL_* environment variables, so that an
// operator configures tracing as for any other OpenTelemetry program:
//
//	OTEL_TRACES_EXPORTER        otlp or none; unset: otlp if an endpoint is
//	                            set, else none
//	OTEL_EXPORTER_OTLP_ENDPOINT (and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
//	                            _HEADERS, _TIMEOUT, _INSECURE, _CERTIFICATE...)
//	                            where the OTLP exporter sends, read by it
//	OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) http/protobuf
//	                            (default) or grpc
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
//	                            the resource; the service name defaults to
//	                            the caller's (baton-master, baton-regionserver)
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*
//	                            sampling and batching, read by the SDK
//	OTEL_SDK_DISABLED=true      no tracing whatever else is set
//
// Tracing is off unless an exporter is configured: then no provider is
// built at all (nil), and Baton's packages, given none, make no spans.
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrConfig is wrapped by the errors about OTEL_* values Baton cannot use.
var ErrConfig = errors.New("otelenv: bad OpenTelemetry configuration")

// Resource names the process in its spans: the default service name (the
// environment's OTEL_SERVICE_NAME wins) and its instance (a node id).
type Resource struct {
	ServiceName string
	InstanceID  string
}

// Enabled reports whether the environment asks for traces, and how they
// are exported (the protocol, "" when disabled).
func Enabled(getenv func(string) string) (protocol string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return "", nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return "", nil
		}
	case "otlp":
	default:
		return "", fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: this build exports otlp only (or none)", ErrConfig, exp)
	}
	protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch protocol {
	case "":
		return "http/protobuf", nil // the specification's default
	case "http/protobuf", "grpc":
		return protocol, nil
	}
	return "", fmt.Errorf("%w: OTLP protocol %q: want http/protobuf or grpc", ErrConfig, protocol)
}

// TracerProvider builds the tracer provider the environment asks for, or
// returns nil (and a shutdown that does nothing) when it asks for none.
// The exporter reads its own OTEL_EXPORTER_OTLP_* variables from the
// process environment. Call shutdown before exiting: it exports what is
// still buffered.
func TracerProvider(ctx context.Context, getenv func(string) string, res Resource) (tp *sdktrace.TracerProvider, shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	protocol, err := Enabled(getenv)
	if err != nil || protocol == "" {
		return nil, none, err
	}
	var exp *otlptrace.Exporter
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, none, fmt.Errorf("otelenv: OTLP exporter (%s): %w", protocol, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", res.ServiceName)}
	if res.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", res.InstanceID))
	}
	// Later options win: the environment's service name and attributes
	// over the defaults given here.
	r, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, none, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(r))
	return tp, tp.Shutdown, nil
}
