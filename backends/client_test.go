package backends_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"google.golang.org/grpc"
)

// fakeBackend answers ModelInfer with whatever answer returns, to test how the
// client treats a backend that breaks the protocol.
type fakeBackend struct {
	inference.UnimplementedGRPCInferenceServiceServer
	answer func(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error)
}

func (f *fakeBackend) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return f.answer(ctx, req)
}

func startFake(t *testing.T, answer func(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error)) *backends.Client {
	t.Helper()
	g := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(g, &fakeBackend{answer: answer})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	c, err := backends.NewClient(lis.Addr().String(), backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func out(name, dt string, shape ...int64) *inference.ModelInferResponse_InferOutputTensor {
	return &inference.ModelInferResponse_InferOutputTensor{Name: name, Datatype: dt, Shape: shape}
}

func TestClientRejectsGarbageResponses(t *testing.T) {
	// The client sends 3 items of 1 row: a correct answer has 3 rows.
	items := [][]api.Tensor{item(1, 1), item(2, 1), item(3, 1)}
	for _, tc := range []struct {
		name string
		resp *inference.ModelInferResponse
		want string // part of the error message
	}{
		{"no outputs", &inference.ModelInferResponse{}, "no outputs"},
		{"too few rows", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 2, 1)}, RawOutputContents: [][]byte{fp32(1, 2)}}, "want 3 rows"},
		{"too many rows", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 4, 1)}, RawOutputContents: [][]byte{fp32(1, 2, 3, 4)}}, "want 3 rows"},
		{"raw shorter than shape", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 3, 1)}, RawOutputContents: [][]byte{fp32(1, 2)}}, "needs 12 bytes"},
		{"raw longer than shape", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 3, 1)}, RawOutputContents: [][]byte{fp32(1, 2, 3, 4)}}, "needs 12 bytes"},
		{"raw count", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 3, 1), out("p", "FP32", 3, 1)}, RawOutputContents: [][]byte{fp32(1, 2, 3)}}, "2 outputs but 1 raw"},
		{"no data", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 3, 1)}}, "no data"},
		{"unknown datatype", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP99", 3, 1)}, RawOutputContents: [][]byte{fp32(1, 2, 3)}}, "unknown datatype"},
		{"scalar", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32")}, RawOutputContents: [][]byte{fp32(1)}}, "want 3 rows"},
		{"negative dim", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "FP32", 3, -1)}, RawOutputContents: [][]byte{{}}}, "must be ≥ 0"},
		{"BYTES past the end", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "BYTES", 3)}, RawOutputContents: [][]byte{{1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b', 200, 0, 0, 0}}}, "runs past"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startFake(t, func(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
				return tc.resp, nil
			})
			res, err := c.Infer(context.Background(), "m", items)
			if !errors.Is(err, backends.ErrBackendBadResponse) {
				t.Fatalf("got %v, %v; want ErrBackendBadResponse", res, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestClientAcceptsTypedOutputContents(t *testing.T) {
	// A KServe server that answers with typed contents instead of raw bytes.
	c := startFake(t, func(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
		o := out("o", "INT64", 3, 1)
		o.Contents = &inference.InferTensorContents{Int64Contents: []int64{10, 20, 30}}
		return &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{o}}, nil
	})
	res, err := c.Infer(context.Background(), "m", [][]api.Tensor{item(1, 2), item(2, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0][0]; got.Shape[0] != 2 || len(got.Data) != 16 || got.Data[0] != 10 || got.Data[8] != 20 {
		t.Errorf("item 0: %+v, want rows 10 and 20", got)
	}
	if got := res[1][0]; got.Shape[0] != 1 || len(got.Data) != 8 || got.Data[0] != 30 {
		t.Errorf("item 1: %+v, want row 30", got)
	}
}

func TestClientStacksOnDimensionZero(t *testing.T) {
	var seen *inference.ModelInferRequest
	c := startFake(t, func(_ context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
		seen = req
		n := req.GetInputs()[0].GetShape()[0]
		return &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("o", "UINT8", n)}, RawOutputContents: [][]byte{make([]byte, n)}}, nil
	})
	items := [][]api.Tensor{item(1, 1), item(2, 3), item(3, 1)}
	if _, err := c.Infer(context.Background(), "m", items); err != nil {
		t.Fatal(err)
	}
	in := seen.GetInputs()
	if seen.GetModelName() != "m" || len(in) != 1 || in[0].GetName() != "input0" || in[0].GetDatatype() != "FP32" ||
		len(in[0].GetShape()) != 2 || in[0].GetShape()[0] != 5 || in[0].GetShape()[1] != 4 {
		t.Fatalf("request inputs %v; want one input0 FP32 [5 4]", in)
	}
	want := append(append(append([]byte{}, items[0][0].Data...), items[1][0].Data...), items[2][0].Data...)
	if string(seen.GetRawInputContents()[0]) != string(want) {
		t.Error("raw_input_contents is not the items' data concatenated in order")
	}
}

func TestClientRejectsInconsistentItems(t *testing.T) {
	c, err := backends.NewClient("127.0.0.1:1", backends.ClientOptions{}) // never dialed: items fail first
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := item(2, 1)
	other[0].Name = "other"
	wide := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 5}, Data: make([]byte, 20)}}
	short := item(3, 1)
	short[0].Data = short[0].Data[:12]
	two := []api.Tensor{item(4, 1)[0], {Name: "x", Datatype: "FP32", Shape: []int64{2, 1}, Data: make([]byte, 8)}}
	for _, tc := range []struct {
		name  string
		items [][]api.Tensor
	}{
		{"no items", nil},
		{"no inputs", [][]api.Tensor{{}}},
		{"different names", [][]api.Tensor{item(1, 1), other}},
		{"different inner shape", [][]api.Tensor{item(1, 1), wide}},
		{"short data", [][]api.Tensor{item(1, 1), short}},
		{"input count", [][]api.Tensor{item(1, 1), two}},
		{"rows disagree in an item", [][]api.Tensor{two}},
		{"scalar", [][]api.Tensor{{{Name: "s", Datatype: "FP32", Data: make([]byte, 4)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Infer(context.Background(), "m", tc.items); !errors.Is(err, backends.ErrInvalidInput) {
				t.Fatalf("got %v, want ErrInvalidInput", err)
			}
		})
	}
}

func TestClientTimesOutOnHangingBackend(t *testing.T) {
	c := startFake(t, func(ctx context.Context, _ *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
		<-ctx.Done() // hang until the client gives up
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Infer(ctx, "m", [][]api.Tensor{item(1, 1)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v to give up after a 200ms deadline", el)
	}
}

func TestClientUnavailableBackend(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Infer(ctx, "m", [][]api.Tensor{item(1, 1)}); !errors.Is(err, backends.ErrBackendUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("got %v, want ErrBackendUnavailable naming %s", err, addr)
	}
	if err := c.Load(ctx, "m", 1, 1); !errors.Is(err, backends.ErrBackendUnavailable) {
		t.Errorf("load: %v, want ErrBackendUnavailable", err)
	}
}

func TestPoolReusesOneClientPerAddress(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	p := backends.NewPool(backends.ClientOptions{})
	c1, err := p.Client(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := p.Client(b.addr)
	if c1 != c2 {
		t.Error("two clients for one address")
	}
	if _, err := c1.Infer(context.Background(), "m", [][]api.Tensor{item(1, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(b.addr); err != nil {
		t.Fatal(err)
	}
	c3, _ := p.Client(b.addr)
	if c3 == c1 {
		t.Error("Remove kept the client")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Client(b.addr); !errors.Is(err, backends.ErrPoolClosed) {
		t.Errorf("after Close: %v, want ErrPoolClosed", err)
	}
}

// BenchmarkInferLoopback measures one Infer of 8 items (FP32 [1, 256] each)
// through a loopback sim backend whose profiled duration is 1µs: stacking,
// gRPC both ways, server validation, checksums and splitting.
func BenchmarkInferLoopback(b *testing.B) {
	be := startSimProfile(b, `
profiles:
  - model: fast
    hardware: cpu
    entries:
      - {batch: 8, concurrency: 4, duration: 1us}
`)
	load(b, be, "fast", 8, 4)
	items := make([][]api.Tensor, 8)
	for i := range items {
		items[i] = []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 256}, Data: make([]byte, 1024)}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := be.client.Infer(ctx, "fast", items); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
