package loadgen

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// grpcServer is a GRPCInferenceService on 127.0.0.1:0 with a delay and an error
// code chosen by request id.
type grpcServer struct {
	inference.UnimplementedGRPCInferenceServiceServer
	Addr  string
	delay time.Duration
	code  func(id int) codes.Code // nil or codes.OK: success

	received    atomic.Int64
	inflight    atomic.Int64
	maxInflight atomic.Int64
	mu          sync.Mutex
	requests    []*inference.ModelInferRequest
}

func startGRPC(t *testing.T, gs *grpcServer) *grpcServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, gs)
	go s.Serve(ln) //nolint:errcheck // ends at Stop
	t.Cleanup(s.Stop)
	gs.Addr = ln.Addr().String()
	return gs
}

// request returns the i-th request the server received.
func (g *grpcServer) request(i int) *inference.ModelInferRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests[i]
}

func (g *grpcServer) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	g.received.Add(1)
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for m := g.maxInflight.Load(); n > m && !g.maxInflight.CompareAndSwap(m, n); m = g.maxInflight.Load() {
	}
	g.mu.Lock()
	g.requests = append(g.requests, req)
	g.mu.Unlock()
	select {
	case <-time.After(g.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.code != nil {
		id, _ := strconv.Atoi(req.GetId())
		if c := g.code(id); c != codes.OK {
			return nil, status.Error(c, "injected")
		}
	}
	return &inference.ModelInferResponse{ModelName: req.GetModelName(), Id: req.GetId()}, nil
}

func (g *grpcServer) ModelMetadata(_ context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	if req.GetName() != "s" {
		return nil, status.Errorf(codes.NotFound, "model %q", req.GetName())
	}
	return &inference.ModelMetadataResponse{Name: "s", Inputs: []*inference.ModelMetadataResponse_TensorMetadata{
		{Name: "x", Datatype: "INT32", Shape: []int64{-1, 3}},
	}}, nil
}

func TestOpenLoopSlowServerGRPC(t *testing.T) {
	gs := startGRPC(t, &grpcServer{delay: 300 * time.Millisecond})
	rep, err := Run(t.Context(), Options{
		Target: gs.Addr, Protocol: "grpc", Session: "s", Rate: 50, Arrival: "constant", Duration: time.Second,
		Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 50 || rep.OK != 50 || gs.received.Load() != 50 {
		t.Errorf("sent %d, ok %d, server received %d; want 50 (errors %v)", rep.Sent, rep.OK, gs.received.Load(), rep.Errors)
	}
	if got := gs.maxInflight.Load(); got < 8 {
		t.Errorf("server saw at most %d requests at once, want ≥ 8 (open loop)", got)
	}
	if rep.MinMs < 300 {
		t.Errorf("min latency %.1f ms; the server sleeps 300 ms", rep.MinMs)
	}
	r := gs.request(0)
	if r.GetModelName() != "s" || len(r.GetInputs()) != 1 || r.GetInputs()[0].GetName() != "x" ||
		!cmp.Equal(r.GetInputs()[0].GetShape(), []int64{1, 2}) || !bytes.Equal(r.GetRawInputContents()[0], le32(0x3f800000, 0x40000000)) {
		t.Errorf("request %v; want model s, FP32 x [1,2] = raw 1.0, 2.0", r)
	}
}

func TestErrorKindsGRPC(t *testing.T) {
	cs := []codes.Code{codes.OK, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Unavailable, codes.InvalidArgument, codes.Internal, codes.NotFound, codes.Unimplemented}
	gs := startGRPC(t, &grpcServer{code: func(id int) codes.Code { return cs[id%len(cs)] }})
	rep, err := Run(t.Context(), Options{
		Target: "grpc://" + gs.Addr, Protocol: "grpc", Session: "s", Rate: 200, Arrival: "constant",
		Duration: 400 * time.Millisecond, Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	want := map[string]int64{
		"rejected: overloaded": 10, "deadline": 10, "unavailable": 10, "bad request": 10,
		"server error": 20, "not found": 10,
	}
	if d := cmp.Diff(want, rep.Errors); d != "" {
		t.Errorf("errors by kind (-want +got):\n%s", d)
	}
	if rep.Sent != 80 || rep.OK != 10 {
		t.Errorf("sent %d ok %d, want 80, 10", rep.Sent, rep.OK)
	}
}

// TestGRPCTimeoutAndMetadata: the model metadata gives the input; a client
// timeout is "timeout", not the server's "deadline".
func TestGRPCTimeoutAndMetadata(t *testing.T) {
	gs := startGRPC(t, &grpcServer{delay: 2 * time.Second})
	rep, err := Run(t.Context(), Options{
		Target: gs.Addr, Protocol: "grpc", Session: "s", Rate: 20, Arrival: "constant", Duration: 200 * time.Millisecond,
		Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 4 || rep.Errors["timeout"] != 4 {
		t.Errorf("sent %d, errors %v; want 4 timeouts", rep.Sent, rep.Errors)
	}
	if rep.DurationS > 1.9 {
		t.Errorf("duration %.2f s; the 100 ms timeout should end the run before the 2 s replies", rep.DurationS)
	}
	r := gs.request(0)
	if in := r.GetInputs()[0]; in.GetName() != "x" || in.GetDatatype() != "INT32" || !cmp.Equal(in.GetShape(), []int64{1, 3}) ||
		!bytes.Equal(r.GetRawInputContents()[0], make([]byte, 12)) {
		t.Errorf("input %v raw % x; want zeros INT32 x [1,3] from the metadata", in, r.GetRawInputContents()[0])
	}
}

func TestGRPCUnreachable(t *testing.T) {
	rep, err := Run(t.Context(), Options{
		Target: "127.0.0.1:1", Protocol: "grpc", Session: "s", Rate: 100, Arrival: "constant", Duration: 50 * time.Millisecond,
		Timeout: 2 * time.Second, Drain: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 5 || rep.Errors["unavailable"] != 5 {
		t.Errorf("sent %d, errors %v; want 5 unavailable", rep.Sent, rep.Errors)
	}
	if len(rep.Notes) == 0 {
		t.Error("no note about the failed model metadata")
	}
}
