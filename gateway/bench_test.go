package gateway

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// echoRunner answers every item at once, on the caller's goroutine, with its
// inputs: the gateway with nothing behind it.
type echoRunner struct{}

func (echoRunner) Run(_ context.Context, _, _ string, in []api.Tensor, _ time.Time, done func([]api.Tensor, Timing, error)) {
	done(in, Timing{}, nil)
}
func (echoRunner) Estimate(string, string) time.Duration { return 0 }

// bareHandler is what a gateway cannot do with less: decode the same request and
// encode the same response, in a fasthttp handler.
func bareHandler(ctx *fasthttp.RequestCtx) {
	var req InferRequest
	if err := DecodeInferRequest(ctx.PostBody(), &req); err != nil {
		ctx.SetStatusCode(400)
		return
	}
	resp := InferResponse{ModelName: "echo", ID: req.ID, Outputs: req.Inputs,
		Parameters: []Param{{"piccolo.e.queue_ms", 0}, {"piccolo.e.compute_ms", 0}, {"piccolo.e.total_ms", 0}, {"piccolo.e2e_ms", 0}}}
	b, _ := AppendInferResponse(make([]byte, 0, 1024), &resp)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func serveFast(b *testing.B, h fasthttp.RequestHandler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln)
	b.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

// hammer sends n requests from conc connections and returns requests per second.
func hammer(b *testing.B, addr, path string, body []byte, n, conc int) float64 {
	c := &fasthttp.HostClient{Addr: addr, MaxConns: conc}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + path)
			req.Header.SetMethod("POST")
			req.SetBody(body)
			for left.Add(-1) >= 0 {
				if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Errorf("%s: %v status %d %s", path, err, resp.StatusCode(), resp.Body())
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkGatewayVsBareFasthttp measures, in one run, the gateway's HTTP
// throughput on a one-module session whose module answers at once, and a bare
// fasthttp handler doing the same decode and encode; it reports both and their
// ratio (target ≥ 0.5). Rounds alternate so that load from elsewhere on the
// machine hits both alike.
//
//	go test -run '^$' -bench GatewayVsBareFasthttp -benchtime 20000x ./gateway
func BenchmarkGatewayVsBareFasthttp(b *testing.B) {
	exec, err := NewExecutor(echoRunner{}, sessionsFromYAML(b, `
sessions:
  - name: echo
    slo: 1s
    modules:
      - {name: e, model: m, rate: 1}
`))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	gw := serveFast(b, srv.HandleHTTP)
	bare := serveFast(b, bareHandler)
	body := benchBody
	const conc = 16
	hammer(b, gw, "/v2/models/echo/infer", body, 500, conc) // warm up both
	hammer(b, bare, "/", body, 500, conc)
	b.ResetTimer()
	var gwRate, bareRate float64
	rounds := 4
	per := max(b.N/rounds, 200)
	for range rounds {
		gwRate += hammer(b, gw, "/v2/models/echo/infer", body, per, conc) / float64(rounds)
		bareRate += hammer(b, bare, "/", body, per, conc) / float64(rounds)
	}
	b.ReportMetric(gwRate, "gateway_req/s")
	b.ReportMetric(bareRate, "bare_req/s")
	b.ReportMetric(gwRate/bareRate, "ratio")
}

// BenchmarkGatewayAddedLatency measures the latency the gateway adds over calling
// a sim backend directly: open-loop gRPC requests at half the backend's maximum
// load (batch 1, 2 ms: 500 req/s max, 250 req/s offered), first straight to the
// backend, then through the gateway (gRPC, the same raw tensors); it reports
// p50/p99 of both and the differences (target p99 added ≤ 1 ms). The plan has
// batch 1 only, so the gateway adds no batching wait: what is measured is the
// gateway's own cost (decode, DAG, dispatcher, backend client, encode).
//
//	go test -run '^$' -bench GatewayAddedLatency -benchtime 1x ./gateway
func BenchmarkGatewayAddedLatency(b *testing.B) {
	const profiles = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: fast
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 2ms}
sessions:
  - name: one
    slo: 100ms
    modules:
      - {name: f, model: fast, rate: 100}
`
	h := startHarness(b, profiles, 1, "tc")
	backendAddr := h.cfg.Backends[0].Address
	conn, err := grpc.NewClient(backendAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	direct := inference.NewGRPCInferenceServiceClient(conn)
	mk := func(model string) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 4}}},
			RawInputContents: [][]byte{fp32(1, 2, 3, 4)}}
	}
	const rate, n = 250.0, 500
	run := func(c inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest) []time.Duration {
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if _, err := c.ModelInfer(context.Background(), req); err != nil {
					b.Errorf("request %d: %v", i, err)
				}
				lat[i] = time.Since(t0)
			}()
		}
		wg.Wait()
		return lat
	}
	pct := func(lat []time.Duration) (p50, p99 time.Duration) {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[len(lat)/2], lat[len(lat)*99/100]
	}
	run(direct, mk("fast")) // warm up
	run(h.grpc, mk("one"))
	b.ResetTimer()
	// Alternate rounds so that load from elsewhere on the machine hits both alike.
	var dl, gl []time.Duration
	for range 4 {
		dl = append(dl, run(direct, mk("fast"))...)
		gl = append(gl, run(h.grpc, mk("one"))...)
	}
	d50, d99 := pct(dl)
	g50, g99 := pct(gl)
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(msf(d50), "direct_p50_ms")
	b.ReportMetric(msf(d99), "direct_p99_ms")
	b.ReportMetric(msf(g50), "gateway_p50_ms")
	b.ReportMetric(msf(g99), "gateway_p99_ms")
	b.ReportMetric(msf(g50-d50), "added_p50_ms")
	b.ReportMetric(msf(g99-d99), "added_p99_ms")
	fmt.Fprintf(testingWriter{b}, "direct p50 %.2f p99 %.2f ms; gateway p50 %.2f p99 %.2f ms\n", msf(d50), msf(d99), msf(g50), msf(g99))
}

type testingWriter struct{ b *testing.B }

func (w testingWriter) Write(p []byte) (int, error) { w.b.Log(string(p)); return len(p), nil }

// BenchmarkExecutorInfer is the executor's own cost per request on a two-module
// chain with an instant runner.
func BenchmarkExecutorInfer(b *testing.B) {
	exec, err := NewExecutor(echoRunner{}, sessionsFromYAML(b, `
sessions:
  - name: chain
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1}
      - {name: b, model: m, rate: 1, after: [a]}
`))
	if err != nil {
		b.Fatal(err)
	}
	req := InferRequest{Inputs: input(1, 2, 3)}
	b.ReportAllocs()
	for b.Loop() {
		var resp InferResponse
		if err := exec.Infer(context.Background(), "chain", &req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleHTTP is the HTTP handler's cost per request (route, decode,
// execute a one-module session with an instant runner, encode), without sockets.
func BenchmarkHandleHTTP(b *testing.B) {
	exec, err := NewExecutor(echoRunner{}, sessionsFromYAML(b, `
sessions:
  - name: echo
    slo: 1s
    modules:
      - {name: e, model: m, rate: 1}
`))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/v2/models/echo/infer")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetBody(benchBody)
		srv.HandleHTTP(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
