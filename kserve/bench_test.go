package kserve

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/valyala/fasthttp"
)

// bareHandler is what a gateway cannot do with less: decode the same request and
// encode the same response, in a fasthttp handler.
func bareHandler(ctx *fasthttp.RequestCtx) {
	var req gateway.InferRequest
	if err := DecodeInferRequest(ctx.PostBody(), &req); err != nil {
		ctx.SetStatusCode(400)
		return
	}
	resp := gateway.InferResponse{ModelName: "echo", ID: req.ID, Outputs: req.Inputs,
		Parameters: []gateway.Param{{Key: "piccolo.e.queue_ms", Value: 0}, {Key: "piccolo.e.compute_ms", Value: 0}, {Key: "piccolo.e.total_ms", Value: 0}, {Key: "piccolo.e2e_ms", Value: 0}}}
	b, _ := AppendInferResponse(make([]byte, 0, 1024), &resp)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// BenchmarkGatewayVsBareFasthttp measures, in one run, the gateway's HTTP
// throughput on a one-module session whose module answers at once, and a bare
// fasthttp handler doing the same decode and encode; it reports both and their
// ratio (target ≥ 0.5). Rounds alternate so that load from elsewhere on the
// machine hits both alike.
//
//	go test -run '^$' -bench GatewayVsBareFasthttp -benchtime 20000x ./kserve
func BenchmarkGatewayVsBareFasthttp(b *testing.B) {
	srv := echoServer(b)
	gw := testharness.ServeFast(b, srv.HandleHTTP)
	bare := testharness.ServeFast(b, bareHandler)
	body := benchBody
	const conc = 16
	testharness.Hammer(b, gw, "/v2/models/echo/infer", body, 500, conc) // warm up both
	testharness.Hammer(b, bare, "/", body, 500, conc)
	b.ResetTimer()
	var gwRate, bareRate float64
	rounds := 4
	per := max(b.N/rounds, 200)
	for range rounds {
		gwRate += testharness.Hammer(b, gw, "/v2/models/echo/infer", body, per, conc) / float64(rounds)
		bareRate += testharness.Hammer(b, bare, "/", body, per, conc) / float64(rounds)
	}
	b.ReportMetric(gwRate, "gateway_req/s")
	b.ReportMetric(bareRate, "bare_req/s")
	b.ReportMetric(gwRate/bareRate, "ratio")
}

// BenchmarkHandleHTTP is the HTTP handler's cost per request (route, decode,
// execute a one-module session with an instant runner, encode), without sockets.
func BenchmarkHandleHTTP(b *testing.B) {
	srv := echoServer(b)
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

// BenchmarkHandleHTTPBinary is BenchmarkHandleHTTP with the FP32 input in
// binary (the binary tensor data extension) and the output asked back in
// binary.
func BenchmarkHandleHTTPBinary(b *testing.B) {
	srv := echoServer(b)
	var req gateway.InferRequest
	if err := DecodeInferRequest(benchBody, &req); err != nil {
		b.Fatal(err)
	}
	in := req.Inputs[0]
	header := fmt.Sprintf(`{"parameters":{"binary_data_output":true},"inputs":[{"name":%q,"shape":%s,"datatype":%q,"parameters":{"binary_data_size":%d}}]}`,
		in.Name, strings.ReplaceAll(fmt.Sprint(in.Shape), " ", ","), in.Datatype, len(in.Data))
	body := append([]byte(header), in.Data...)
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/v2/models/echo/infer")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.Set(HeaderContentLength, strconv.Itoa(len(header)))
		ctx.Request.SetBody(body)
		srv.HandleHTTP(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// echoServer is a Server over one session, echo, whose one module answers at
// once with its inputs (gatewaytest.EchoRunner).
func echoServer(b *testing.B) *Server {
	b.Helper()
	exec, err := gateway.NewDAGRunner(gatewaytest.EchoRunner{}, gatewaytest.SessionsFromYAML(b, `
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
	return srv
}
