package main

import (
	"github.com/spf13/pflag"

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

// options are the flags as tracing.Options (the process sets Service).
func (t tracingFlags) options() tracing.Options {
	return tracing.Options{Endpoint: t.endpoint, Insecure: t.insecure, SampleRatio: t.ratio}
}
