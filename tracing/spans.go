package tracing

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of Piccolo's spans (beside OpenTelemetry's semantic ones).
const (
	AttrSession   = attribute.Key("piccolo.session")
	AttrModule    = attribute.Key("piccolo.module")
	AttrRequestID = attribute.Key("piccolo.request_id")
	AttrBatchSize = attribute.Key("piccolo.batch.size")    // real items in the batch
	AttrDummies   = attribute.Key("piccolo.batch.dummies") // dummy items padding it (§III-D)
	AttrBackend   = attribute.Key("piccolo.backend")       // the backend's host:port
	AttrStatus    = attribute.Key("http.response.status_code")
)

// headerCarrier reads and writes W3C trace context on fasthttp headers.
type headerCarrier struct {
	req  *fasthttp.RequestHeader
	resp *fasthttp.ResponseHeader
}

func (c headerCarrier) Get(key string) string {
	if c.req != nil {
		return string(c.req.Peek(key))
	}
	return string(c.resp.Peek(key))
}

func (c headerCarrier) Set(key, value string) {
	if c.resp != nil {
		c.resp.Set(key, value)
		return
	}
	c.req.Set(key, value)
}

func (c headerCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// StartRequest starts the server span of one HTTP infer request, a child of
// the traceparent the client sent (a new trace when it sent none). Call it
// only when Enabled.
func StartRequest(ctx context.Context, h *fasthttp.RequestHeader, session string) (context.Context, trace.Span) {
	ctx = clientParent(Propagator.Extract(ctx, headerCarrier{req: h}))
	return Tracer().Start(ctx, "infer "+session, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrSession.String(session)))
}

// StartRPC starts the span of one gRPC infer request, a child of the RPC's
// server span (the stats handler's, which read the traceparent), named as
// StartRequest names an HTTP request's. Call it only when Enabled.
func StartRPC(ctx context.Context, session string) (context.Context, trace.Span) {
	return Tracer().Start(ctx, "infer "+session, trace.WithAttributes(AttrSession.String(session)))
}

// EndRPC ends a gRPC request's span with the status it maps to (HTTP's, as
// the metrics count it).
func EndRPC(span trace.Span, status int) {
	span.SetAttributes(AttrStatus.Int(status))
	if status >= 500 {
		span.SetStatus(codes.Error, fasthttp.StatusMessage(status))
	}
	span.End()
}

// EndRequest ends an HTTP request's span with the status answered, and
// writes its traceparent on the response, so that the client can find the
// trace. A 5xx marks the span as an error (a 4xx is the client's).
func EndRequest(span trace.Span, h *fasthttp.ResponseHeader, status int) {
	span.SetAttributes(AttrStatus.Int(status))
	if status >= 500 {
		span.SetStatus(codes.Error, fasthttp.StatusMessage(status))
	}
	if span.SpanContext().IsValid() {
		Propagator.Inject(trace.ContextWithSpan(context.Background(), span), headerCarrier{resp: h})
	}
	span.End()
}

// Traceparent returns the W3C traceparent of the span in ctx ("" when none),
// for a gRPC response header.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	var m mapCarrier = map[string]string{}
	Propagator.Inject(ctx, m)
	return m["traceparent"]
}

type mapCarrier map[string]string

func (m mapCarrier) Get(k string) string { return m[k] }
func (m mapCarrier) Set(k, v string)     { m[k] = v }
func (m mapCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// StartModule starts the span of a request's item in one module, from its
// arrival, when the request's span is sampled; otherwise it returns nil and
// the item is not traced. Call it only when Enabled.
func StartModule(ctx context.Context, session, module string, arrival time.Time) trace.Span {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	_, span := Tracer().Start(ctx, "module "+module, trace.WithTimestamp(arrival),
		trace.WithAttributes(AttrSession.String(session), AttrModule.String(module)))
	return span
}

// EndModule ends an item's module span: a queue span from arrival to sent and
// a compute span from sent to finished (none when the item was never sent),
// the error if any.
func EndModule(span trace.Span, arrival, sent, finished time.Time, err error) {
	ctx := trace.ContextWithSpan(context.Background(), span)
	end := finished
	if end.IsZero() {
		end = time.Now()
	}
	if !sent.IsZero() {
		_, q := Tracer().Start(ctx, "queue", trace.WithTimestamp(arrival))
		q.End(trace.WithTimestamp(sent))
		_, c := Tracer().Start(ctx, "compute", trace.WithTimestamp(sent))
		c.End(trace.WithTimestamp(end))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// StartBatch starts the span of one batch a module sends, a trace of its own
// linked to the module spans of the requests it carries (links), and returns
// ctx carrying it for the backend call. With no links (no traced item in the
// batch) it returns ctx and nil: the batch is not traced.
func StartBatch(ctx context.Context, module, backend string, items, dummies int, links []trace.Link) (context.Context, trace.Span) {
	if len(links) == 0 {
		return ctx, nil
	}
	return Tracer().Start(ctx, "batch "+module, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(AttrModule.String(module), AttrBackend.String(backend),
			AttrBatchSize.Int(items), AttrDummies.Int(dummies)))
}

// EndBatch ends a batch's span with the batch's error, if any.
func EndBatch(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
