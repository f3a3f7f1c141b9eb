package tracing

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestClientCannotForceSampling: at ratio 0 a client's traceparent with
// the sampled flag keeps its trace id but is not recorded, unless the
// gateway trusts its clients' sampling (TrustClientSampling).
func TestClientCannotForceSampling(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, trust := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		shutdown, err := Setup(context.Background(), Options{Exporter: exp, TrustClientSampling: trust})
		if err != nil {
			t.Fatal(err)
		}
		var h fasthttp.RequestHeader
		h.Set("traceparent", tp)
		_, span := StartRequest(context.Background(), &h, "s")
		sc := span.SpanContext()
		span.End()
		exported := len(exp.GetSpans())
		_ = shutdown(context.Background())
		if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("trust %v: trace id %s; want the client's", trust, sc.TraceID())
		}
		if sc.IsSampled() != trust || (exported == 1) != trust {
			t.Errorf("trust %v: sampled %v, %d spans exported; want sampled and exported only when trusted", trust, sc.IsSampled(), exported)
		}
	}
}
