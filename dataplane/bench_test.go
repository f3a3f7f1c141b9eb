package dataplane

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGatewayAddedLatency measures the latency the gateway adds over calling
// a sim backend directly: open-loop gRPC requests at half the backend's maximum
// load (batch 1, 2 ms: 500 req/s max, 250 req/s offered), first straight to the
// backend, then through the gateway (gRPC, the same raw tensors); it reports
// p50/p99 of both and the differences (target p99 added ≤ 1 ms). The plan has
// batch 1 only, so the gateway adds no batching wait: what is measured is the
// gateway's own cost (decode, DAG, dispatcher, backend client, encode).
//
//	go test -run '^$' -bench GatewayAddedLatency -benchtime 1x ./dataplane
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
			RawInputContents: [][]byte{gatewaytest.FP32(1, 2, 3, 4)}}
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
	b.Logf("direct p50 %.2f p99 %.2f ms; gateway p50 %.2f p99 %.2f ms\n", msf(d50), msf(d99), msf(g50), msf(g99))
}
