package api

import (
	"slices"
	"strings"
	"testing"
)

// ZeroTensor gives the declared input with rows rows, its variable
// dimensions 1, and as many zero bytes as its datatype needs; bad inputs
// are errors naming the input.
func TestZeroTensor(t *testing.T) {
	for _, tc := range []struct {
		datatype  string
		shape     []int64
		rows      int
		wantShape []int64
		wantBytes int
	}{
		{"FP32", []int64{-1, 3, -1}, 4, []int64{4, 3, 1}, 4 * 3 * 4},
		{"BYTES", []int64{-1}, 2, []int64{2}, 2 * 4}, // a zero length per element
		{"BOOL", nil, 3, []int64{3}, 3},              // a declared scalar: one per row
		{"FP16", []int64{1, 2}, 1, []int64{1, 2}, 4},
	} {
		z, err := ZeroTensor("x", tc.datatype, tc.shape, tc.rows, 0)
		if err != nil || !slices.Equal(z.Shape, tc.wantShape) || len(z.Data) != tc.wantBytes || z.Validate() != nil {
			t.Errorf("ZeroTensor(%s %v, rows %d) = %v, %d bytes, %v; want %v, %d bytes, valid", tc.datatype, tc.shape, tc.rows, z.Shape, len(z.Data), err, tc.wantShape, tc.wantBytes)
		}
	}
	if _, err := ZeroTensor("img", "F32", []int64{1}, 1, 0); err == nil || !strings.Contains(err.Error(), `input "img": unknown datatype "F32"; allowed: BOOL`) {
		t.Errorf("unknown datatype: %v", err)
	}
	if _, err := ZeroTensor("img", "FP32", []int64{-1, 1000, 1000}, 8, 1<<20); err == nil || !strings.Contains(err.Error(), `input "img": shape [8 1000 1000] is 8000000 elements, over 1048576`) {
		t.Errorf("over the limit: %v", err)
	}
}
