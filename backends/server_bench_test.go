package backends_test

import (
	"context"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
)

// echo is an Executor of one model, "echo", whose Run returns its inputs:
// what a ModelInfer costs on the Server itself, without a model's work.
type echo struct{}

func (echo) Models() []string { return []string{"echo"} }
func (echo) Load(string, int, int) (backends.Model, error) {
	return echoModel{}, nil
}

type echoModel struct{}

func (echoModel) Info() backends.ModelInfo {
	return backends.ModelInfo{Name: "echo", MaxBatch: 8, Concurrency: 1, AnyInputs: true}
}
func (echoModel) Run(_ context.Context, in []api.Tensor, _ int) ([]api.Tensor, error) {
	return in, nil
}
func (echoModel) Close() error { return nil }

// BenchmarkServerModelInfer is one ModelInfer of one FP32 [1, 4] item on the
// Server, in-process (no gRPC): lookup, the model's reference (taken and
// released around the batch), validation, Run and the response.
func BenchmarkServerModelInfer(b *testing.B) {
	srv, err := backends.NewServer(echo{}, backends.ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := srv.Load("echo", 8, 1); err != nil {
		b.Fatal(err)
	}
	req := &inference.ModelInferRequest{
		ModelName:        "echo",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 4}}},
		RawInputContents: [][]byte{make([]byte, 16)},
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := srv.ModelInfer(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
