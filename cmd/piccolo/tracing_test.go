package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/tracing"
)

// TestTracingSpanTree sends traced requests through a real gateway and sim
// backend (HTTP and gRPC over loopback) with the SDK's in-memory exporter, and
// checks the tree a user sees in their trace store: the request's span is a
// child of the client's traceparent and is returned in the response headers;
// each module of the session is a child span with queue and compute spans;
// each batch is a span linked to the module spans of every request it
// carried, whose backend call is a client span the backend continues. A
// request without a traceparent is not traced at sampling ratio 0.
func TestTracingSpanTree(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := tracing.Setup(context.Background(), tracing.Options{Exporter: exp, SampleRatio: 0, Service: "test", TrustClientSampling: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(testharness.ChainProfiles), 0o644); err != nil {
		t.Fatal(err)
	}
	bo := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json", drain: time.Second, metrics: "off"}
	addr, _ := startBackend(t, ctx, bo)
	o := &gatewayOptions{listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo", dispatch: "tc", maxBody: 1 << 20,
		slack: 0.1, logFmt: "json", drain: time.Second, files: []string{cfgPath, writeBackendsFile(t, dir, addr)}}
	addrs := make(chan [2]string, 1)
	go func() { _ = runGateway(ctx, o, func(h, g string) { addrs <- [2]string{h, g} }) }()
	var httpAddr, grpcAddr string
	select {
	case a := <-addrs:
		httpAddr, grpcAddr = a[0], a[1]
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}

	// Eight concurrent HTTP requests, each with a traceparent of its own, so
	// that some of them share a batch.
	const n = 8
	const body = `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	parents := make([]trace.SpanContext, n)
	var wg sync.WaitGroup
	for i := range n {
		parents[i] = trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0xa, byte(i + 1)}, SpanID: trace.SpanID{0xb, byte(i + 1)}, TraceFlags: trace.FlagsSampled})
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", "http://"+httpAddr+"/v2/models/pipe/infer", strings.NewReader(body))
			req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", parents[i].TraceID(), parents[i].SpanID()))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request %d: status %d", i, resp.StatusCode)
			}
			if tp := resp.Header.Get("traceparent"); !strings.Contains(tp, parents[i].TraceID().String()) {
				t.Errorf("request %d: response traceparent %q, want trace %s", i, tp, parents[i].TraceID())
			}
		}()
	}
	wg.Wait()
	// One without a traceparent: at ratio 0 nothing of it is recorded.
	if resp, err := http.Post("http://"+httpAddr+"/v2/models/pipe/infer", "application/json", strings.NewReader(body)); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.Header.Get("traceparent") != "" && strings.HasSuffix(resp.Header.Get("traceparent"), "-01") {
		t.Errorf("an untraced request came back sampled: %q", resp.Header.Get("traceparent"))
	}

	// One gRPC request with a traceparent in its metadata.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gparent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xc}, SpanID: trace.SpanID{0xd}, TraceFlags: trace.FlagsSampled})
	gctx := metadata.AppendToOutgoingContext(ctx, "traceparent", fmt.Sprintf("00-%s-%s-01", gparent.TraceID(), gparent.SpanID()))
	var header metadata.MD
	raw := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40} // FP32 1, 2
	if _, err := inference.NewGRPCInferenceServiceClient(conn).ModelInfer(gctx, &inference.ModelInferRequest{ModelName: "pipe",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawInputContents: [][]byte{raw}}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if tp := header.Get("traceparent"); len(tp) != 1 || !strings.Contains(tp[0], gparent.TraceID().String()) {
		t.Errorf("gRPC response traceparent %v, want trace %s", tp, gparent.TraceID())
	}

	// The spans end on the backend's and the gateway's goroutines just after
	// the answers: wait until every expected one is exported, the backend's
	// side of each batch's call included (it ends after the gateway has the
	// answer; waiting on the compute spans alone failed on a loaded host),
	// and the gateway's gRPC server span, which ends after the answer is
	// sent (not waiting on it failed once on a loaded host).
	traced := append(slices.Clone(parents), gparent)
	rpcEnded := func(spans tracetest.SpanStubs) bool {
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindServer && s.Parent.SpanID() == gparent.SpanID() {
				return true
			}
		}
		return false
	}
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = exp.GetSpans()
		if countNamed(spans, "compute") >= 2*len(traced) && batchCallsContinued(spans) && rpcEnded(spans) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	linkedFrom := map[trace.SpanID]int{} // module span → batch spans linking it
	maxLinks := 0
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "batch ") {
			continue
		}
		maxLinks = max(maxLinks, len(s.Links))
		for _, l := range s.Links {
			linkedFrom[l.SpanContext.SpanID()]++
		}
		if s.Parent.IsValid() {
			t.Errorf("%s has a parent; a batch is a trace of its own", s.Name)
		}
		if c := childrenOf(spans, s.SpanContext.SpanID()); len(c) != 1 || c[0].SpanKind != trace.SpanKindClient ||
			len(childrenOf(spans, c[0].SpanContext.SpanID())) != 1 {
			t.Errorf("%s: want one backend call span continued by the backend, got children %v", s.Name, names(c))
		}
	}
	for i, p := range traced {
		var root *tracetest.SpanStub
		for j, s := range spans {
			if s.SpanContext.TraceID() == p.TraceID() && s.Name == "infer pipe" {
				root = &spans[j]
			}
		}
		if root == nil {
			t.Fatalf("request %d: no span named \"infer pipe\" in trace %s", i, p.TraceID())
		}
		if i < n && root.Parent.SpanID() != p.SpanID() {
			t.Errorf("request %d: span's parent %s, want the client's %s", i, root.Parent.SpanID(), p.SpanID())
		}
		if i == n { // gRPC: the request's span is a child of the RPC's server span, the client's child
			if rpc, ok := byID[root.Parent.SpanID()]; !ok || rpc.SpanKind != trace.SpanKindServer || rpc.Parent.SpanID() != p.SpanID() {
				t.Errorf("gRPC request: span's parent %s is not the RPC's server span under the client's %s", root.Parent.SpanID(), p.SpanID())
			}
		}
		mods := childrenOf(spans, root.SpanContext.SpanID())
		if got := names(mods); !slices.Equal(got, []string{"module detect", "module recognize"}) {
			t.Errorf("request %d: module spans %v, want detect and recognize", i, got)
		}
		for _, m := range mods {
			if got := names(childrenOf(spans, m.SpanContext.SpanID())); !slices.Equal(got, []string{"compute", "queue"}) {
				t.Errorf("request %d %s: children %v, want queue and compute", i, m.Name, got)
			}
			if linkedFrom[m.SpanContext.SpanID()] != 1 || len(m.Links) != 1 {
				t.Errorf("request %d %s: linked from %d batch spans, links %d; want one each way", i, m.Name, linkedFrom[m.SpanContext.SpanID()], len(m.Links))
			}
		}
		if i == 0 {
			t.Logf("span tree of request 0 (trace %s):\n%s", p.TraceID(), tree(spans, byID, *root, ""))
		}
	}
	if maxLinks < 2 {
		t.Errorf("no batch carried two traced requests (most links %d): the links between batched requests are untested", maxLinks)
	}
	if got := countNamed(spans, "infer pipe"); got != len(traced) {
		t.Errorf("%d request spans, want %d: the request without a traceparent was traced at ratio 0", got, len(traced))
	}
}

// batchCallsContinued reports whether every batch span's backend call span
// has its child, the backend's server span, among spans.
func batchCallsContinued(spans tracetest.SpanStubs) bool {
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "batch ") {
			continue
		}
		for _, c := range childrenOf(spans, s.SpanContext.SpanID()) {
			if len(childrenOf(spans, c.SpanContext.SpanID())) == 0 {
				return false
			}
		}
	}
	return true
}

func countNamed(spans tracetest.SpanStubs, name string) int {
	c := 0
	for _, s := range spans {
		if s.Name == name {
			c++
		}
	}
	return c
}

func childrenOf(spans tracetest.SpanStubs, id trace.SpanID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == id && s.Parent.IsValid() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b tracetest.SpanStub) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func names(spans []tracetest.SpanStub) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// tree prints root's subtree, and for each module span the batch it ran in
// and that batch's backend call.
func tree(spans tracetest.SpanStubs, byID map[trace.SpanID]tracetest.SpanStub, root tracetest.SpanStub, indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s  %.1fms\n", indent, root.Name, float64(root.EndTime.Sub(root.StartTime).Microseconds())/1000)
	for _, l := range root.Links {
		if bs, ok := byID[l.SpanContext.SpanID()]; ok {
			fmt.Fprintf(&b, "%s  ~ linked %s (%d requests, trace %s)\n", indent, bs.Name, len(bs.Links), bs.SpanContext.TraceID())
			for _, c := range childrenOf(spans, bs.SpanContext.SpanID()) {
				b.WriteString(tree(spans, byID, c, indent+"    "))
			}
		}
	}
	for _, c := range childrenOf(spans, root.SpanContext.SpanID()) {
		b.WriteString(tree(spans, byID, c, indent+"  "))
	}
	return b.String()
}
