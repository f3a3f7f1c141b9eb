package onnx

import (
	"fmt"
	"unsafe"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Resized serves a model as a variant of another (docs/variants.md): the same
// .onnx file run at another input size, so one file gives models of different
// cost and accuracy. The served model keeps the input shape Options.Shapes gives
// it (the shape the modules before it produce); Run resizes every item of the
// model's only input, FP32 C×H×W, bilinearly to Input before the call, and with
// Restore resizes the first output's last two dimensions back to the served
// H×W (a detector's probability map, which the step after it reads in the
// served canvas's pixels).
type Resized struct {
	// File is the model whose .onnx file runs (the file name without .onnx).
	File string
	// Input is the item shape C, H, W the file runs at.
	Input []int64
	// Restore resizes the first output back to the served height and width.
	Restore bool
}

// resizer is a loaded model's Resized with the served shape it resizes from.
type resizer struct {
	c, h, w int // served item shape
	H, W    int // shape the file runs at
	restore bool
}

func newResizer(model string, r Resized, served []int64) (*resizer, error) {
	if len(served) != 3 || len(r.Input) != 3 || served[0] != r.Input[0] {
		return nil, fmt.Errorf("%w: %q: resizing from shape %v to %v: want C×H×W shapes of the same C (give the served shape in Options.Shapes)", backends.ErrInvalidInput, model, served, r.Input)
	}
	for _, d := range append(append([]int64(nil), served...), r.Input...) {
		if d < 1 || d > 1<<14 {
			return nil, fmt.Errorf("%w: %q: resizing from shape %v to %v: dimensions must be 1 to 16384", backends.ErrInvalidInput, model, served, r.Input)
		}
	}
	return &resizer{c: int(served[0]), h: int(served[1]), w: int(served[2]), H: int(r.Input[1]), W: int(r.Input[2]), restore: r.Restore}, nil
}

// input resizes the batch t (n items of c×h×w FP32) into dst (8-byte aligned,
// reused) and returns it with the shape it now has. src is a reused aligned
// scratch buffer for t's bytes.
func (r *resizer) input(t *api.Tensor, n int, src, dst *[]byte) ([]byte, []int64, error) {
	if t.Datatype != "FP32" || len(t.Shape) != 4 || t.Shape[1] != int64(r.c) || t.Shape[2] != int64(r.h) || t.Shape[3] != int64(r.w) {
		return nil, nil, fmt.Errorf("%w: input %q has shape %v %s; want [%d %d %d %d] FP32", backends.ErrInvalidInput, t.Name, t.Shape, t.Datatype, n, r.c, r.h, r.w)
	}
	*src = aligned(*src, len(t.Data))
	copy(*src, t.Data)
	*dst = aligned(*dst, n*r.c*r.H*r.W*4)
	from, to := floats(*src), floats(*dst)
	for p := 0; p < n*r.c; p++ {
		bilinear(to[p*r.H*r.W:(p+1)*r.H*r.W], r.H, r.W, from[p*r.h*r.w:(p+1)*r.h*r.w], r.h, r.w)
	}
	return *dst, []int64{int64(n), int64(r.c), int64(r.H), int64(r.W)}, nil
}

// output resizes t (…×H×W FP32, as the file answered) back to …×h×w.
func (r *resizer) output(t api.Tensor) (api.Tensor, error) {
	k := len(t.Shape)
	if t.Datatype != "FP32" || k < 2 {
		return t, fmt.Errorf("onnx runtime: output %q has shape %v %s; resizing back needs FP32 ×H×W", t.Name, t.Shape, t.Datatype)
	}
	sh, sw := int(t.Shape[k-2]), int(t.Shape[k-1])
	planes := 1
	for _, d := range t.Shape[:k-2] {
		planes *= int(d)
	}
	src := aligned(nil, len(t.Data))
	copy(src, t.Data)
	dst := aligned(nil, planes*r.h*r.w*4)
	from, to := floats(src), floats(dst)
	for p := 0; p < planes; p++ {
		bilinear(to[p*r.h*r.w:(p+1)*r.h*r.w], r.h, r.w, from[p*sh*sw:(p+1)*sh*sw], sh, sw)
	}
	shape := append(append([]int64(nil), t.Shape[:k-2]...), int64(r.h), int64(r.w))
	return api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: dst}, nil
}

// floats views an 8-byte aligned byte slice as float32s (little-endian hosts).
func floats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// bilinear resizes the plane src (sh×sw) into dst (dh×dw), sampling at pixel
// centres (align_corners = false, as PaddleOCR's cv2.resize). Written here
// because the planes are float tensors, not images: x/image/draw works on
// image.Image and would cost a conversion each way.
func bilinear(dst []float32, dh, dw int, src []float32, sh, sw int) {
	fy, fx := float32(sh)/float32(dh), float32(sw)/float32(dw)
	for y := 0; y < dh; y++ {
		sy := (float32(y)+0.5)*fy - 0.5
		y0 := int(sy)
		if sy < 0 {
			sy, y0 = 0, 0
		}
		y1 := min(y0+1, sh-1)
		wy := sy - float32(y0)
		r0, r1 := src[y0*sw:(y0+1)*sw], src[y1*sw:(y1+1)*sw]
		row := dst[y*dw : (y+1)*dw]
		for x := range row {
			sx := (float32(x)+0.5)*fx - 0.5
			x0 := int(sx)
			if sx < 0 {
				sx, x0 = 0, 0
			}
			x1 := min(x0+1, sw-1)
			wx := sx - float32(x0)
			top := r0[x0] + (r0[x1]-r0[x0])*wx
			bot := r1[x0] + (r1[x1]-r1[x0])*wx
			row[x] = top + (bot-top)*wy
		}
	}
}
