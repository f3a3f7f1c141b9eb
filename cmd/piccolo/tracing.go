package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/tracing"
)

// tracingFlags are the OpenTelemetry flags of gateway and backend.
type tracingFlags struct {
	endpoint string
	insecure bool
	ratio    float64
}

func addTracingFlags(f *pflag.FlagSet, t *tracingFlags) {
	f.StringVar(&t.endpoint, "otlp-endpoint", "", "send OpenTelemetry traces over OTLP/gRPC to this collector host:port (empty: tracing off; docs/observability.md, \"Tracing\")")
	f.BoolVar(&t.insecure, "otlp-insecure", false, "with --otlp-endpoint: send without TLS (a collector on loopback or a sidecar)")
	f.Float64Var(&t.ratio, "trace-sampling", 0.01, "with --otlp-endpoint: the share of requests without a sampled traceparent that are traced, in [0, 1] (a request with one follows its parent)")
}

// startTracing sets up tracing as the flags say, before any server or backend
// client is made, and returns the flush to run at exit.
func startTracing(ctx context.Context, t tracingFlags, service string, log *zap.Logger) (func(), error) {
	shutdown, err := tracing.Setup(ctx, tracing.Options{Endpoint: t.endpoint, Insecure: t.insecure, SampleRatio: t.ratio, Service: service})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %q --trace-sampling %v: %w", t.endpoint, t.ratio, err)
	}
	if t.endpoint != "" {
		log.Info("tracing on", zap.String("otlp_endpoint", t.endpoint), zap.Float64("sampling", t.ratio))
	}
	return func() {
		if err := shutdown(context.Background()); err != nil {
			log.Warn("tracing: flush at exit failed", zap.Error(err))
		}
	}, nil
}
