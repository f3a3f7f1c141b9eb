package api

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bytesTensor is a BYTES tensor of shape [2, 2]: rows {"a", ""} and {"bc", "d"}.
func bytesTensor() Tensor {
	return Tensor{Name: "s", Datatype: "BYTES", Shape: []int64{2, 2},
		Data: []byte{1, 0, 0, 0, 'a', 0, 0, 0, 0, 2, 0, 0, 0, 'b', 'c', 1, 0, 0, 0, 'd'}}
}

func TestRowOffsets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		t       Tensor
		want    []int
		wantErr string
	}{
		{"bytes", bytesTensor(), []int{0, 9, 20}, ""},
		{"int16", Tensor{Name: "f", Datatype: "INT16", Shape: []int64{3, 2}, Data: make([]byte, 12)}, []int{0, 4, 8, 12}, ""},
		{"no rows", Tensor{Name: "f", Datatype: "FP32", Shape: []int64{0, 4}}, []int{0}, ""},
		{"scalar", Tensor{Name: "x", Datatype: "FP32", Data: make([]byte, 4)}, nil, "scalar has no batch dimension"},
		{"uneven", Tensor{Name: "f", Datatype: "UINT8", Shape: []int64{2}, Data: make([]byte, 3)}, nil, "do not split into 2 rows"},
		{"truncated bytes", Tensor{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Data: []byte{5, 0, 0, 0, 'a'}}, nil, "runs past the data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.t.RowOffsets(nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("RowOffsets = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RowOffsets (-want +got):\n%s", diff)
			}
		})
	}
}

func fp32(name string, shape ...int64) Tensor {
	n, _ := NumElements(shape)
	return Tensor{Name: name, Datatype: "FP32", Shape: shape, Data: make([]byte, 4*n)}
}

// TestCanBatch: which items may share a batch, and what the error names when
// they may not.
func TestCanBatch(t *testing.T) {
	img := fp32("image", 1, 3, 8, 8)
	for _, tc := range []struct {
		name string
		a, b []Tensor
		want string // "" when they can share
	}{
		{"same shape", []Tensor{img}, []Tensor{img}, ""},
		{"more rows", []Tensor{img}, []Tensor{fp32("image", 4, 3, 8, 8)}, ""},
		{"two tensors", []Tensor{img, bytesTensor()}, []Tensor{img, bytesTensor()}, ""},
		{"other width", []Tensor{img}, []Tensor{fp32("image", 1, 3, 8, 9)}, `tensor "image" has shape [1 3 8 9] against [1 3 8 8]; only dimension 0 may differ`},
		{"other name", []Tensor{img}, []Tensor{fp32("img", 1, 3, 8, 8)}, `tensor 0 is "img" FP32[1 3 8 8] against "image"`},
		{"other datatype", []Tensor{img}, []Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{1, 3, 8, 8}}}, `"image" UINT8`},
		{"other rank", []Tensor{img}, []Tensor{fp32("image", 1, 192)}, "the same tensors in the same order"},
		{"missing tensor", []Tensor{img, bytesTensor()}, []Tensor{img}, "1 tensors against 2"},
		{"scalar", []Tensor{fp32("x")}, []Tensor{fp32("x")}, `tensor "x" is a scalar`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CanBatch(tc.a, tc.b)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CanBatch = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CanBatch = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		item []Tensor
		want int64
		err  string
	}{
		{"one", []Tensor{fp32("x", 3, 2)}, 3, ""},
		{"agree", []Tensor{fp32("x", 2, 2), bytesTensor()}, 2, ""},
		{"disagree", []Tensor{fp32("x", 3, 2), bytesTensor()}, 0, `tensor "s" has 2 rows, tensor "x" has 3`},
		{"scalar", []Tensor{fp32("x")}, 0, "scalar"},
		{"none", nil, 0, "no tensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Rows(tc.item)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Rows = %d, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Rows = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestSplitRows(t *testing.T) {
	x := Tensor{Name: "x", Datatype: "INT16", Shape: []int64{2, 2}, Data: []byte{1, 0, 2, 0, 3, 0, 4, 0}}
	got, err := SplitRows([]Tensor{x, bytesTensor()})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Tensor{
		{{Name: "x", Datatype: "INT16", Shape: []int64{1, 2}, Data: []byte{1, 0, 2, 0}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{1, 2}, Data: []byte{1, 0, 0, 0, 'a', 0, 0, 0, 0}}},
		{{Name: "x", Datatype: "INT16", Shape: []int64{1, 2}, Data: []byte{3, 0, 4, 0}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{1, 2}, Data: []byte{2, 0, 0, 0, 'b', 'c', 1, 0, 0, 0, 'd'}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SplitRows (-want +got):\n%s", diff)
	}
	for i := range got {
		for j := range got[i] {
			if err := got[i][j].Validate(); err != nil {
				t.Errorf("row %d: %v", i, err)
			}
		}
	}
	if _, err := SplitRows([]Tensor{fp32("x", 3, 2), bytesTensor()}); err == nil || !strings.Contains(err.Error(), "must agree in dimension 0") {
		t.Errorf("SplitRows of disagreeing tensors = %v", err)
	}
}
