package otelenv

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/baton-dev/baton/internal/testwait"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
		err  bool
	}{
		{env: nil, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: "grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: "http/protobuf"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: ""},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: ""},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: true},
	} {
		got, err := Enabled(env(tc.env))
		if tc.err {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("%v: error %v, want ErrConfig", tc.env, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

func TestOffByDefault(t *testing.T) {
	tp, shutdown, err := TracerProvider(context.Background(), env(nil), Resource{ServiceName: "baton-master"})
	if err != nil || tp != nil {
		t.Fatalf("no OTEL_* variables: provider %v, error %v; want none", tp, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestExportsOverHTTP: with an endpoint set, spans reach an OTLP/HTTP
// collector, under the service name the environment gives.
func TestExportsOverHTTP(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	getenv := env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL})
	tp, shutdown, err := TracerProvider(context.Background(), getenv, Resource{ServiceName: "baton-master", InstanceID: "m1"})
	if err != nil || tp == nil {
		t.Fatalf("provider %v, error %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "span")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "a POST to /v1/traces", func() bool { return posts.Load() > 0 })
}

func TestResourceFromEnvWins(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // never reached: nothing is exported
	tp, shutdown, err := TracerProvider(context.Background(), env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}), Resource{ServiceName: "baton-master", InstanceID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	defer func() { _ = shutdown(ctx) }()
	rec := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec)
	_, span := tp.Tracer("test").Start(context.Background(), "x")
	span.End()
	attrs := map[attribute.Key]string{}
	for _, kv := range rec.Ended()[0].Resource().Attributes() {
		attrs[kv.Key] = kv.Value.Emit()
	}
	if attrs["service.name"] != "from-env" || attrs["service.instance.id"] != "m1" {
		t.Errorf("resource %v: want service.name from the environment and the instance id given", attrs)
	}
}
