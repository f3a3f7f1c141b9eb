package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestSetupRefusesARatioOutsideZeroOne(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5} {
		if _, err := Setup(context.Background(), Options{Endpoint: "127.0.0.1:4317", SampleRatio: r}); err == nil || !strings.Contains(err.Error(), "outside [0, 1]") {
			t.Errorf("ratio %v: err %v, want one naming the allowed range", r, err)
		}
	}
	if Enabled() {
		t.Error("a refused Setup turned tracing on")
	}
}

func TestOffByDefault(t *testing.T) {
	shutdown, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if Enabled() || ServerOptions() != nil || DialOptions() != nil {
		t.Error("no endpoint and no exporter, yet tracing is on")
	}
}

// A batch (a new root) is recorded when it links to a sampled request, even at
// ratio 0, and not when its links are unsampled.
func TestBatchLinkedToASampledRequestIsRecorded(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := Setup(context.Background(), Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}})
	_, s := StartBatch(context.Background(), "m", "b:1", 2, 0, []trace.Link{{SpanContext: unsampled}, {SpanContext: sampled}})
	EndBatch(s, nil)
	_, s = StartBatch(context.Background(), "m", "b:1", 1, 0, []trace.Link{{SpanContext: unsampled}})
	EndBatch(s, nil)
	if _, s := StartBatch(context.Background(), "m", "b:1", 1, 0, nil); s != nil {
		t.Error("a batch with no traced item got a span")
	}
	got := exp.GetSpans()
	if len(got) != 1 || len(got[0].Links) != 2 {
		t.Fatalf("exported %d spans (%v), want the one batch linked to a sampled request", len(got), got)
	}
}
