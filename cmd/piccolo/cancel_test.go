package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/metrics"
)

// cancelConfig is one module whose only batch (1 item) takes 1 s on a
// single-lane machine: a request sent while another runs waits in the
// gateway's queue for up to 1 s (long beside the 10 ms the test's clients
// wait, even on a loaded machine).
const cancelConfig = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 1s}
sessions:
  - name: one
    slo: 10s
    modules:
      - {name: m, model: m, rate: 0.5}
`

const cancelBody = `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`

// hangUpAfter sends one infer request over a raw connection to addr and
// closes the connection after wait, without reading the answer.
func hangUpAfter(t *testing.T, addr string, wait time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v2/models/one/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(cancelBody), cancelBody)
	time.Sleep(wait)
	c.Close()
}

// TestClientGoneItemNeverComputed: clients that go away 10 ms after sending
// (an HTTP client closing its connection, a gRPC client cancelling its
// call) while their item waits in the gateway's queue behind a running
// batch: the backend never computes it (its item counter), the gateway
// counts it cancelled. The first client's item was already running when it
// went: it runs to the end and its result is dropped.
func TestClientGoneItemNeverComputed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backendMetrics := freeAddr(t)
	grpcAddr := freeAddr(t)
	g := startSimGateway(t, ctx, cancelConfig, func(bo *backendOptions, o *gatewayOptions) {
		bo.metrics = backendMetrics
		o.grpcListen = grpcAddr
		onePlan(o) // a re-plan makes a new runner, whose counters start at 0
	})
	httpAddr := strings.TrimPrefix(g.url, "http://")
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	if _, err := client.ServerReady(ctx, &inference.ServerReadyRequest{}); err != nil {
		t.Fatal(err)
	}

	hangUpAfter(t, httpAddr, 10*time.Millisecond) // A: sent at once, running when its client goes
	hangUpAfter(t, httpAddr, 10*time.Millisecond) // B: queued behind A
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, ccancel)
	_, err = client.ModelInfer(cctx, &inference.ModelInferRequest{ModelName: "one", Inputs: []*inference.ModelInferRequest_InferInputTensor{{
		Name: "input0", Datatype: "FP32", Shape: []int64{1, 4},
		Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}) // C: queued behind A
	ccancel()
	if status.Code(err) != codes.Canceled {
		t.Fatalf("gRPC call cut at 10 ms: %v", err)
	}
	// Had B and C run, the backend would have finished them by 3 s.
	time.Sleep(3300 * time.Millisecond)

	computed := scrape(t, "http://"+backendMetrics, "piccolo_backend_items_total", `model="m"`) -
		scrape(t, g.url, metrics.DispatcherSlotDummiesTotal, `module="m"`)
	cancelled := scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="cancelled"`)
	dropped := scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="dropped"`)
	t.Logf("backend computed %.0f real items; gateway cancelled %.0f, dropped %.0f", computed, cancelled, dropped)
	if computed != 1 || cancelled != 2 || dropped != 1 {
		t.Errorf("backend computed %.0f items, gateway cancelled %.0f and dropped %.0f: want 1 (A), 2 (B, C), 1 (A)", computed, cancelled, dropped)
	}
}
