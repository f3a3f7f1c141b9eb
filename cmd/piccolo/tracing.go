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
	trust    bool
}

func addTracingFlags(f *pflag.FlagSet, t *tracingFlags) {
	f.StringVar(&t.endpoint, "otlp-endpoint", "", "send OpenTelemetry traces over OTLP/gRPC to this collector host:port (empty: tracing off; docs/observability.md, \"Tracing\")")
	f.BoolVar(&t.insecure, "otlp-insecure", false, "with --otlp-endpoint: send without TLS (a collector on loopback or a sidecar)")
	f.Float64Var(&t.ratio, "trace-sampling", 0.01, "with --otlp-endpoint: the share of requests traced, in [0, 1], decided on the trace id (a client's traceparent gives the ids; its sampled flag counts only with --trace-trust-client)")
	f.BoolVar(&t.trust, "trace-trust-client", false, "with --otlp-endpoint: a client's traceparent sampled flag has its request traced (parent-based at the edge); off: a client cannot force its trace to be sampled")
}

// options are the flags as tracing.Options (the process sets Service).
func (t tracingFlags) options() tracing.Options {
	return tracing.Options{Endpoint: t.endpoint, Insecure: t.insecure, SampleRatio: t.ratio, TrustClientSampling: t.trust}
}
