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

// hangUpWhen sends one infer request over a raw connection to addr and
// closes the connection once ready reports true (waited for up to 20 s),
// without reading the answer.
func hangUpWhen(t *testing.T, addr, what string, ready func() bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v2/models/one/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(cancelBody), cancelBody)
	waitFor(t, 20*time.Second, what, ready)
	c.Close()
}

// TestClientGoneItemNeverComputed: clients that go away once they have sent
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

	// Each client goes once the gateway holds its item, an event read from
	// the gateway's metrics rather than a sleep, which a loaded host outran.
	outstanding := func() float64 { return scrape(t, g.url, metrics.GatewayModuleOutstanding, `module="m"`) }
	cancelledNow := func() float64 { return scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="cancelled"`) }
	hangUpWhen(t, httpAddr, "A sent to the backend", func() bool { // A: running when its client goes
		return scrape(t, g.url, metrics.DispatcherSlotItemsTotal, `module="m"`) >= 1
	})
	hangUpWhen(t, httpAddr, "B queued behind A", func() bool { return outstanding() >= 2 }) // B: queued behind A
	waitFor(t, 20*time.Second, "B cancelled", func() bool { return cancelledNow() >= 1 })
	held := outstanding() // A, and B unless its cancel is still being counted
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		defer ccancel()
		for outstanding() <= held { // C queued behind A
			select {
			case <-cctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	_, err = client.ModelInfer(cctx, &inference.ModelInferRequest{ModelName: "one", Inputs: []*inference.ModelInferRequest_InferInputTensor{{
		Name: "input0", Datatype: "FP32", Shape: []int64{1, 4},
		Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}) // C: queued behind A
	ccancel()
	if status.Code(err) != codes.Canceled {
		t.Fatalf("gRPC call cut once queued: %v", err)
	}
	// A's batch ends and its result is dropped; B and C left the queue before
	// it did, so nothing else can run.
	waitFor(t, 20*time.Second, "A's result dropped", func() bool {
		return scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="dropped"`) >= 1
	})
	// Had B or C been sent after A, the backend would have finished it 1 s
	// later (a window for what must not happen, not an ordering: load only
	// makes it less likely to be seen, never a false failure).
	time.Sleep(1300 * time.Millisecond)

	computed := scrape(t, "http://"+backendMetrics, "piccolo_backend_items_total", `model="m"`) -
		scrape(t, g.url, metrics.DispatcherSlotDummiesTotal, `module="m"`)
	cancelled := scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="cancelled"`)
	dropped := scrape(t, g.url, metrics.DispatcherItemsTotal, `outcome="dropped"`)
	t.Logf("backend computed %.0f real items; gateway cancelled %.0f, dropped %.0f", computed, cancelled, dropped)
	if computed != 1 || cancelled != 2 || dropped != 1 {
		t.Errorf("backend computed %.0f items, gateway cancelled %.0f and dropped %.0f: want 1 (A), 2 (B, C), 1 (A)", computed, cancelled, dropped)
	}
}
