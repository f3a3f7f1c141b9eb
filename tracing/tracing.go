package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// ScopeName is the instrumentation scope of Piccolo's own spans.
const ScopeName = "github.com/piccolo-serving/piccolo"

// Options configures Setup. The zero value (no Endpoint, no Exporter) leaves
// tracing off.
type Options struct {
	// Endpoint is the OTLP/gRPC collector's host:port (an OpenTelemetry
	// Collector, Jaeger or Tempo); empty with no Exporter: tracing off.
	Endpoint string
	// Insecure sends to Endpoint without TLS (a collector on loopback or a
	// sidecar).
	Insecure bool
	// SampleRatio is the fraction of traces recorded, in [0, 1], decided on
	// the trace id: a request from a client (StartRequest,
	// EdgeServerOptions) is recorded with this probability whatever its
	// traceparent's sampled flag says, unless TrustClientSampling; a
	// process's own callers (the gateway calling a backend) are followed.
	SampleRatio float64
	// TrustClientSampling lets a client's traceparent sampled flag decide
	// (parent-based sampling at the edge too): only for clients that are
	// trusted not to have every request traced (a trace store's load).
	TrustClientSampling bool
	// Service is the service.name resource attribute ("piccolo-gateway").
	Service string
	// Exporter, when set, replaces the OTLP exporter (tests use the SDK's
	// in-memory exporter) and spans are exported synchronously.
	Exporter sdktrace.SpanExporter
}

var (
	enabled  atomic.Bool
	provider atomic.Pointer[sdktrace.TracerProvider]
	tracer   atomic.Pointer[tracerBox]
)

// trustClients is Options.TrustClientSampling of the last Setup.
var trustClients atomic.Bool

type tracerBox struct{ t trace.Tracer }

// Setup starts tracing as opts say and returns the function that flushes and
// stops it (call it at exit; it is a no-op when tracing is off). Errors: a
// sample ratio outside [0, 1], or an exporter that cannot be built.
func Setup(ctx context.Context, opts Options) (shutdown func(context.Context) error, err error) {
	if opts.SampleRatio < 0 || opts.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sampling ratio %v is outside [0, 1]", opts.SampleRatio)
	}
	if opts.Endpoint == "" && opts.Exporter == nil {
		return func(context.Context) error { return nil }, nil
	}
	if opts.Service == "" {
		opts.Service = "piccolo"
	}
	var spanOpt sdktrace.TracerProviderOption
	if opts.Exporter != nil {
		spanOpt = sdktrace.WithSyncer(opts.Exporter)
	} else {
		eopts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.Endpoint)}
		if opts.Insecure {
			eopts = append(eopts, otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, eopts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter to %s: %w", opts.Endpoint, err)
		}
		spanOpt = sdktrace.WithBatcher(exp)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(opts.Service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(spanOpt, sdktrace.WithResource(res),
		sdktrace.WithSampler(linkedSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio),
			sdktrace.WithRemoteParentNotSampled(sdktrace.TraceIDRatioBased(opts.SampleRatio)))}))
	trustClients.Store(opts.TrustClientSampling)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	provider.Store(tp)
	tracer.Store(&tracerBox{tp.Tracer(ScopeName)})
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}, nil
}

// linkedSampler records a new root span that links to a sampled span (a
// batch carrying a traced request), so that every traced request's batch is
// in the store; anything else is sampled as base says.
type linkedSampler struct{ base sdktrace.Sampler }

func (s linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
					Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
			}
		}
	}
	return s.base.ShouldSample(p)
}

func (s linkedSampler) Description() string { return "LinkedOr{" + s.base.Description() + "}" }

// Enabled reports whether tracing is on: one atomic load, for the request path.
func Enabled() bool { return enabled.Load() }

// Tracer returns Piccolo's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer {
	if b := tracer.Load(); b != nil && Enabled() {
		return b.t
	}
	return noopTracer
}

var noopTracer = noop.NewTracerProvider().Tracer(ScopeName)

// Propagator is the W3C trace context propagator (traceparent, tracestate)
// the gateway reads and writes.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// ServerOptions returns the grpc.ServerOption that records a server span for
// each inference RPC and reads its traceparent, or none while tracing is off.
// Health checks and reflection are not traced.
func ServerOptions() []grpc.ServerOption {
	tp := provider.Load()
	if tp == nil || !Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator), otelgrpc.WithFilter(inferenceOnly)))}
}

// EdgeServerOptions is ServerOptions for the gateway's client-facing gRPC
// server: a client's traceparent gives the trace and parent ids, but its
// sampled flag is dropped (the ratio decides) unless
// Options.TrustClientSampling, so that a client cannot have every request
// traced.
func EdgeServerOptions() []grpc.ServerOption {
	tp := provider.Load()
	if tp == nil || !Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edgePropagator{Propagator}), otelgrpc.WithFilter(inferenceOnly)))}
}

// edgePropagator extracts as its propagator does, then drops the remote
// parent's sampled flag unless clients are trusted (clientParent).
type edgePropagator struct{ propagation.TextMapPropagator }

func (p edgePropagator) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return clientParent(p.TextMapPropagator.Extract(ctx, c))
}

// clientParent drops the sampled flag of ctx's remote span context, a
// client's, unless Options.TrustClientSampling.
func clientParent(ctx context.Context) context.Context {
	if trustClients.Load() {
		return ctx
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc.WithTraceFlags(sc.TraceFlags().WithSampled(false)))
}

// DialOptions returns the grpc.DialOption that records a client span for each
// call to a backend and sends its traceparent, or none while tracing is off.
func DialOptions() []grpc.DialOption {
	tp := provider.Load()
	if tp == nil || !Enabled() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator), otelgrpc.WithFilter(inferenceOnly)))}
}

// inferenceOnly keeps the KServe v2 inference calls and drops the health
// probes and reflection, which would otherwise fill a trace store.
func inferenceOnly(info *stats.RPCTagInfo) bool {
	return strings.HasPrefix(info.FullMethodName, "/inference.GRPCInferenceService/")
}

// StartProcess makes a piccolo process's logger with newLogger (nil:
// zap.NewProduction) and starts tracing as opts say for it (Setup, before
// any server or backend client of the process is made), logging where spans
// go when opts.Endpoint is set. stop flushes the spans (a failed flush is
// logged) and syncs the logger: call it at exit. Errors: newLogger's, or
// Setup's, naming the --otlp-endpoint and --trace-sampling flags that set
// opts.
func StartProcess(ctx context.Context, opts Options, newLogger func() (*zap.Logger, error)) (log *zap.Logger, stop func(), err error) {
	if newLogger == nil {
		newLogger = func() (*zap.Logger, error) { return zap.NewProduction() }
	}
	if log, err = newLogger(); err != nil {
		return nil, nil, err
	}
	shutdown, err := Setup(ctx, opts)
	if err != nil {
		_ = log.Sync()
		return nil, nil, fmt.Errorf("--otlp-endpoint %q --trace-sampling %v: %w", opts.Endpoint, opts.SampleRatio, err)
	}
	if opts.Endpoint != "" {
		log.Info("tracing on", zap.String("otlp_endpoint", opts.Endpoint), zap.Float64("sampling", opts.SampleRatio))
	}
	return log, func() {
		if err := shutdown(context.Background()); err != nil {
			log.Warn("tracing: flush at exit failed", zap.Error(err))
		}
		_ = log.Sync()
	}, nil
}
