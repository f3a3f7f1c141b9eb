package onnx

import (
	"errors"
	"testing"

	"github.com/piccolo-serving/piccolo/backends"
)

// TestBilinear: same size is the identity, halving averages 2×2 blocks, and
// doubling a ramp stays between its neighbours.
func TestBilinear(t *testing.T) {
	src := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	same := make([]float32, 16)
	bilinear(same, 4, 4, src, 4, 4)
	for i := range src {
		if same[i] != src[i] {
			t.Fatalf("identity resize changed %v into %v", src, same)
		}
	}
	half := make([]float32, 4)
	bilinear(half, 2, 2, src, 4, 4)
	if want := []float32{3.5, 5.5, 11.5, 13.5}; half[0] != want[0] || half[1] != want[1] || half[2] != want[2] || half[3] != want[3] {
		t.Errorf("halving %v gave %v; want %v", src, half, want)
	}
	up := make([]float32, 4)
	bilinear(up, 1, 4, []float32{0, 8}, 1, 2)
	if up[0] != 0 || up[3] != 8 || !(up[1] > 0 && up[1] < up[2] && up[2] < 8) {
		t.Errorf("doubling [0 8] gave %v; want a ramp from 0 to 8", up)
	}
}

func TestNewResizerErrors(t *testing.T) {
	for _, tc := range []struct {
		served, input []int64
	}{
		{nil, []int64{3, 480, 480}},
		{[]int64{3, 640, 640}, []int64{1, 480, 480}},
		{[]int64{3, 640, 640}, []int64{3, 0, 480}},
	} {
		if _, err := newResizer("m", Resized{File: "f", Input: tc.input}, tc.served); !errors.Is(err, backends.ErrInvalidInput) {
			t.Errorf("resizing %v to %v: err %v; want ErrInvalidInput", tc.served, tc.input, err)
		}
	}
}
