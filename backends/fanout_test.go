package backends_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
)

// splitter is an executor of one fan-out model, "split": its input x FP32 [1, k]
// becomes k output rows, value FP32 [k, 1] and label BYTES [k]. "bad" is the
// same model breaking the contract: its two outputs disagree on dimension 0.
type splitter struct{}

func (splitter) Models() []string { return []string{"bad", "split"} }

func (splitter) Load(model string, batch, concurrency int) (backends.Model, error) {
	if batch == 0 {
		batch = 1
	}
	return &splitModel{bad: model == "bad", info: backends.ModelInfo{
		Name: model, Platform: "test", MaxBatch: batch, Concurrency: 1, FanOut: true,
		Inputs:  []backends.TensorSpec{{Name: "x", Datatype: "FP32", Shape: []int64{-1, -1}}},
		Outputs: []backends.TensorSpec{{Name: "value", Datatype: "FP32", Shape: []int64{-1, 1}}, {Name: "label", Datatype: "BYTES", Shape: []int64{-1}}},
	}}, nil
}

type splitModel struct {
	bad  bool
	info backends.ModelInfo
}

func (m *splitModel) Info() backends.ModelInfo { return m.info }
func (m *splitModel) Close() error             { return nil }

func (m *splitModel) Run(_ context.Context, in []api.Tensor, n int) ([]api.Tensor, error) {
	k := in[0].Shape[1]
	var labels []byte
	for i := int64(0); i < k; i++ {
		labels = append(labels, 1, 0, 0, 0, byte('a'+i))
	}
	lk := k
	if m.bad {
		lk = k + 1
		labels = append(labels, 1, 0, 0, 0, 'z')
	}
	return []api.Tensor{
		{Name: "value", Datatype: "FP32", Shape: []int64{k, 1}, Data: in[0].Data},
		{Name: "label", Datatype: "BYTES", Shape: []int64{lk}, Data: labels},
	}, nil
}

func TestFanOut(t *testing.T) {
	srv, err := backends.NewServer(splitter{}, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := serve(t, srv)
	ctx := context.Background()

	t.Run("load refuses a batch above 1", func(t *testing.T) {
		err := b.client.Load(ctx, "split", 4, 1)
		if !errors.Is(err, backends.ErrInvalidInput) || !strings.Contains(err.Error(), "batch 1 only") {
			t.Fatalf("load batch 4: %v; want ErrInvalidInput saying batch 1 only", err)
		}
	})
	load(t, b, "split", 1, 1)
	load(t, b, "bad", 1, 1)

	for _, k := range []int{0, 1, 5} {
		xs := make([]float32, k)
		for i := range xs {
			xs[i] = float32(10 * (i + 1))
		}
		item := []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, int64(k)}, Data: fp32(xs...)}}
		out, err := b.client.Infer(ctx, "split", [][]api.Tensor{item})
		if err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		if len(out) != 1 || len(out[0]) != 2 {
			t.Fatalf("k=%d: %d items, want 1 with 2 outputs", k, len(out))
		}
		v, l := out[0][0], out[0][1]
		if v.Shape[0] != int64(k) || l.Shape[0] != int64(k) {
			t.Errorf("k=%d: shapes %v %v; want %d rows each", k, v.Shape, l.Shape, k)
		}
		got := decodeFP32(v.Data)
		for i := range xs {
			if got[i] != xs[i] {
				t.Errorf("k=%d: values %v, want %v", k, got, xs)
				break
			}
		}
	}

	t.Run("the response says fan-out", func(t *testing.T) {
		resp, err := b.raw.ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName:        "split",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 3}}},
			RawInputContents: [][]byte{fp32(1, 2, 3)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetParameters()[backends.ParamFanOut].GetBoolParam() {
			t.Errorf("parameters %v; want %s true", resp.GetParameters(), backends.ParamFanOut)
		}
	})
	t.Run("outputs that disagree are an internal error", func(t *testing.T) {
		item := []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}, Data: fp32(1, 2)}}
		_, err := b.client.Infer(ctx, "bad", [][]api.Tensor{item})
		if !errors.Is(err, backends.ErrBackendFailed) || !strings.Contains(err.Error(), "must agree on dimension 0") {
			t.Errorf("got %v; want ErrBackendFailed saying the outputs must agree", err)
		}
	})
	t.Run("two items are still refused", func(t *testing.T) {
		item := []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}, Data: fp32(1, 2)}}
		_, err := b.client.Infer(ctx, "split", [][]api.Tensor{item, item})
		if !errors.Is(err, backends.ErrInvalidInput) {
			t.Errorf("got %v; want ErrInvalidInput (batch above the loaded max batch 1)", err)
		}
	})
}
