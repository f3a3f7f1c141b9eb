package backends

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// BenchmarkStackSplit measures the client's own work per batch of 8 items
// (FP32 [1, 256]): stacking the inputs and splitting a matching response.
func BenchmarkStackSplit(b *testing.B) {
	items := make([][]api.Tensor, 8)
	for i := range items {
		items[i] = []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 256}, Data: make([]byte, 1024)}}
	}
	resp := &inference.ModelInferResponse{
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "output0", Datatype: "FP32", Shape: []int64{8, 1}}},
		RawOutputContents: [][]byte{make([]byte, 32)},
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, rows, err := stackItems("m", items, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := splitOutputs(resp, rows); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzSplitOutputs feeds arbitrary response bytes to the client's response
// check: it must never panic, and what it accepts must split into exactly the
// items' rows.
func FuzzSplitOutputs(f *testing.F) {
	good := &inference.ModelInferResponse{
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "o", Datatype: "FP32", Shape: []int64{3, 2}}, {Name: "s", Datatype: "BYTES", Shape: []int64{3}}},
		RawOutputContents: [][]byte{make([]byte, 24), {0, 0, 0, 0, 1, 0, 0, 0, 'a', 2, 0, 0, 0, 'b', 'c'}},
	}
	seed, _ := proto.Marshal(good)
	f.Add(seed, uint8(1), uint8(2))
	f.Add([]byte{}, uint8(3), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint8) {
		var resp inference.ModelInferResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		rows := []int64{int64(a % 5), int64(b % 5)}
		out, err := splitOutputs(&resp, rows)
		if err != nil {
			return
		}
		for i, item := range out {
			for _, t2 := range item {
				if t2.Shape[0] != rows[i] {
					t.Fatalf("item %d got %d rows, want %d", i, t2.Shape[0], rows[i])
				}
				if err := t2.Validate(); err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
			}
		}
	})
}
