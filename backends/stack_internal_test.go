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
		_, rows, err := stackItems("m", items)
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

func TestRowOffsets(t *testing.T) {
	bytesT := api.Tensor{Name: "s", Datatype: "BYTES", Shape: []int64{2, 2}, Data: []byte{1, 0, 0, 0, 'a', 0, 0, 0, 0, 2, 0, 0, 0, 'b', 'c', 1, 0, 0, 0, 'd'}}
	got, err := RowOffsets(&bytesT, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 9, 20}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("BYTES offsets %v, want %v", got, want)
	}
	fixed := api.Tensor{Name: "f", Datatype: "INT16", Shape: []int64{3, 2}, Data: make([]byte, 12)}
	got, _ = RowOffsets(&fixed, got[:0])
	if want := []int{0, 4, 8, 12}; len(got) != 4 || got[1] != 4 || got[3] != 12 {
		t.Errorf("INT16 offsets %v, want %v", got, want)
	}
	if _, err := RowOffsets(&api.Tensor{Name: "x", Datatype: "FP32"}, nil); err == nil {
		t.Error("scalar: no error")
	}
}
