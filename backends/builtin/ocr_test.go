package builtin

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

const tol = 1e-4

func TestCTCDecode(t *testing.T) {
	labels := []string{"", "a", "b", "c", " "}
	// onehot builds T steps of C=5 probabilities from the argmax classes.
	onehot := func(classes ...int) []float32 {
		p := make([]float32, 5*len(classes))
		for t, c := range classes {
			for j := 0; j < 5; j++ {
				p[5*t+j] = 0.01
			}
			p[5*t+c] = 0.96
		}
		return p
	}
	var sb strings.Builder
	for _, c := range []struct {
		name    string
		classes []int
		want    string
	}{
		{"collapse repeats", []int{1, 1, 2, 2, 2, 3}, "abc"},
		{"blank separates repeats", []int{1, 0, 1, 2}, "aab"},
		{"all blank", []int{0, 0, 0}, ""},
		{"spaces trimmed, inner kept", []int{4, 1, 4, 2, 4}, "a b"},
		{"class beyond labels dropped", []int{1, 0, 0}, "a"},
	} {
		got, score := CTCDecode(onehot(c.classes...), len(c.classes), 5, labels, &sb)
		if got != c.want {
			t.Errorf("%s: got %q; want %q", c.name, got, c.want)
		}
		if c.want != "" && math.Abs(float64(score)-0.96) > tol {
			t.Errorf("%s: score %v; want 0.96", c.name, score)
		}
	}
}

func TestLoadDictionary(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys.txt")
	os.WriteFile(p, []byte("a\nb\nc"), 0o644) // last line without newline, as ppocr_keys_v1.txt
	got, err := LoadDictionary(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"", "a", "b", "c", " "}, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	if _, err := LoadDictionary(empty); err == nil {
		t.Errorf("empty dictionary accepted")
	}
	if _, err := LoadDictionary(filepath.Join(dir, "none.txt")); err == nil {
		t.Errorf("missing dictionary accepted")
	}
}

// rectMap draws a w×h map with a filled rotated rectangle of probability 0.9.
func rectMap(w, h int, b Box) []float32 {
	p := make([]float32, w*h)
	ux, uy := math.Cos(b.Angle), math.Sin(b.Angle)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			dx, dy := float64(x)+0.5-b.CX, float64(y)+0.5-b.CY
			u, v := dx*ux+dy*uy, -dx*uy+dy*ux
			if math.Abs(u) <= b.Width/2 && math.Abs(v) <= b.Height/2 {
				p[y*w+x] = 0.9
			}
		}
	}
	return p
}

// TestBoxes: a rotated rectangle in the map comes back as one box with its
// center, angle and the sides grown by the unclip distance; a faint region
// (mean below BoxThreshold) and specks below MinSide are dropped; boxes come in
// reading order.
func TestBoxes(t *testing.T) {
	o := DefaultOCR()
	const w, h = 320, 160
	for _, deg := range []float64{0, 3, -5, 180} {
		want := Box{CX: 150, CY: 80, Width: 200, Height: 20, Angle: deg * math.Pi / 180}
		got := o.Boxes(rectMap(w, h, want), w, h)
		if len(got) != 1 {
			t.Fatalf("%v°: %d boxes; want 1", deg, len(got))
		}
		b := got[0]
		d := 200 * 20 * o.UnclipRatio / (2 * 220)
		wantAngle := math.Remainder(want.Angle, math.Pi) // 180° text is the same box: cls decides
		if math.Abs(b.CX-150) > 1.5 || math.Abs(b.CY-80) > 1.5 || math.Abs(b.Angle-wantAngle) > 0.02 ||
			math.Abs(b.Width-(200+2*d)) > 3 || math.Abs(b.Height-(20+2*d)) > 3 || math.Abs(b.Score-0.9) > tol {
			t.Errorf("%v°: got %+v; want center (150, 80), angle %.3f, %.1f×%.1f, score 0.9", deg, b, wantAngle, 200+2*d, 20+2*d)
		}
	}

	// Two lines, the lower one first in the map; a faint region; a speck.
	p := rectMap(w, h, Box{CX: 100, CY: 120, Width: 120, Height: 16})
	upper := rectMap(w, h, Box{CX: 200, CY: 40, Width: 120, Height: 16})
	faint := rectMap(w, h, Box{CX: 280, CY: 120, Width: 40, Height: 16})
	for i := range p {
		p[i] += upper[i]
		if faint[i] > 0 {
			p[i] = 0.4
		}
	}
	p[5*w+5] = 0.9
	got := o.Boxes(p, w, h)
	if len(got) != 2 || got[0].CY > got[1].CY {
		t.Fatalf("got %+v; want the two lines, upper first", got)
	}
}

func TestCanvasAndDetInput(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 320)) // scaled down by 2 onto 640
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	canvas, scale := Canvas(img, 640, nil)
	if scale != 0.5 || len(canvas) != 640*640*3 {
		t.Fatalf("scale %v, %d bytes; want 0.5, %d", scale, len(canvas), 640*640*3)
	}
	if px := canvas[(100*640+100)*3:][:3]; !bytes.Equal(px, []byte{255, 255, 255}) {
		t.Errorf("image pixel %v; want white", px)
	}
	if px := canvas[(400*640+100)*3:][:3]; !bytes.Equal(px, padRGB[:]) {
		t.Errorf("padding pixel %v; want the det mean color %v", px, padRGB)
	}
	x := make([]float32, 3*640*640)
	DetInput(canvas, 640, x)
	plane := 640 * 640
	for c := 0; c < 3; c++ {
		white := (1 - detMean[c]) / detStd[c]
		if v := x[c*plane+100*640+100]; math.Abs(float64(v-white)) > tol {
			t.Errorf("channel %d of white = %v; want %v", c, v, white)
		}
		if v := x[c*plane+400*640+100]; math.Abs(float64(v)) > 0.02 {
			t.Errorf("channel %d of padding = %v; want about 0", c, v)
		}
	}
	small := image.NewGray(image.Rect(0, 0, 100, 50)) // not scaled up
	if _, scale := Canvas(small, 640, nil); scale != 1 {
		t.Errorf("small image scale %v; want 1", scale)
	}
}

// TestCropAndRotate: a crop of a box over a left-dark/right-light canvas keeps
// the content's left-right order, is padded right with 0, and Rotate180 twice is
// the identity while once swaps the halves.
func TestCropAndRotate(t *testing.T) {
	const w, h = 200, 100
	canvas := make([]uint8, w*h*3)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := uint8(0)
			if x >= 100 {
				v = 255
			}
			canvas[(y*w+x)*3], canvas[(y*w+x)*3+1], canvas[(y*w+x)*3+2] = v, v, v
		}
	}
	box := Box{CX: 100, CY: 50, Width: 96, Height: 24} // aspect 4: 192 wide at height 48
	const width = 320
	crop := make([]float32, 3*CropHeight*width)
	cw := Crop(canvas, w, h, box, width, crop)
	if cw != 192 {
		t.Fatalf("content width %d; want 192", cw)
	}
	at := func(c []float32, y, x int) float32 { return c[y*width+x] }
	if at(crop, 24, 10) != -1 || at(crop, 24, 180) != 1 || at(crop, 24, 250) != 0 {
		t.Errorf("left %v, right %v, padding %v; want -1, 1, 0", at(crop, 24, 10), at(crop, 24, 180), at(crop, 24, 250))
	}
	orig := append([]float32(nil), crop...)
	Rotate180(crop, width, cw)
	if at(crop, 24, 10) != 1 || at(crop, 24, 180) != -1 || at(crop, 24, 250) != 0 {
		t.Errorf("turned: left %v, right %v, padding %v; want 1, -1, 0", at(crop, 24, 10), at(crop, 24, 180), at(crop, 24, 250))
	}
	Rotate180(crop, width, cw)
	if !cmp.Equal(orig, crop) {
		t.Errorf("Rotate180 twice is not the identity")
	}
	squashed := Crop(canvas, w, h, Box{CX: 100, CY: 50, Width: 190, Height: 10}, width, crop)
	if squashed != width {
		t.Errorf("content width of a very wide box %d; want %d (squashed)", squashed, width)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultOCR().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*OCR){
		"det size":  func(o *OCR) { o.DetSize = 600 },
		"rec width": func(o *OCR) { o.RecWidth = 321 },
		"threshold": func(o *OCR) { o.Threshold = 1 },
		"unclip":    func(o *OCR) { o.UnclipRatio = math.NaN() },
		"max boxes": func(o *OCR) { o.MaxBoxes = 0 },
	} {
		o := DefaultOCR()
		mod(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
		if _, err := New(Options{OCR: o}); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

func bytesTensor(name string, items ...[]byte) api.Tensor {
	var data []byte
	for _, it := range items {
		data = binary.LittleEndian.AppendUint32(data, uint32(len(it)))
		data = append(data, it...)
	}
	return api.Tensor{Name: name, Datatype: "BYTES", Shape: []int64{int64(len(items))}, Data: data}
}

func TestExecutor(t *testing.T) {
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{OCRBoxes, OCRPre, OCRRotate}, e.Models()); diff != "" {
		t.Errorf("models without a dictionary (-want +got):\n%s", diff)
	}
	if _, err := e.Load(OCRCTC, 1, 1); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("Load(ocr-ctc) without a dictionary = %v; want ErrUnknownModel", err)
	}
	if _, err := e.Load("resize", 1, 1); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("Load(unknown) = %v; want ErrUnknownModel", err)
	}
	if _, err := e.Load(OCRBoxes, 2, 1); !errors.Is(err, backends.ErrInvalidInput) {
		t.Errorf("Load(ocr-boxes, batch 2) = %v; want ErrInvalidInput", err)
	}
	pre, err := e.Load(OCRPre, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info := pre.Info(); info.MaxBatch != DefaultMaxBatch || info.Concurrency != 1 {
		t.Errorf("defaults: batch %d, concurrency %d; want %d, 1", info.MaxBatch, info.Concurrency, DefaultMaxBatch)
	}
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 64, 32))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	png.Encode(&buf, img)
	ctx := context.Background()
	outs, err := pre.Run(ctx, []api.Tensor{bytesTensor(NameImage, buf.Bytes(), buf.Bytes())}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if err := o.Validate(); err != nil || o.Shape[0] != 2 {
			t.Errorf("output %s %v: %v; want 2 valid rows", o.Name, o.Shape, err)
		}
	}
	if _, err := pre.Run(ctx, []api.Tensor{bytesTensor(NameImage, []byte("not an image"))}, 1); !errors.Is(err, backends.ErrInvalidInput) || !strings.Contains(err.Error(), "png") {
		t.Errorf("Run(garbage) = %v; want ErrInvalidInput naming the allowed formats", err)
	}
	if _, err := pre.Run(ctx, []api.Tensor{{Name: "img", Datatype: "BYTES", Shape: []int64{0}}}, 1); !errors.Is(err, backends.ErrInvalidInput) {
		t.Errorf("Run(missing input) = %v; want ErrInvalidInput", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pre.Run(cctx, []api.Tensor{bytesTensor(NameImage, buf.Bytes())}, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Run(canceled) = %v; want context.Canceled", err)
	}

	// ocr-boxes on an empty map: no boxes, every output with 0 rows.
	boxes, err := e.Load(OCRBoxes, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := int64(e.OCR().DetSize)
	empty := []api.Tensor{
		{Name: NameDet, Datatype: "FP32", Shape: []int64{1, 1, s, s}, Data: make([]byte, 4*s*s)},
		{Name: NameCanvas, Datatype: "UINT8", Shape: []int64{1, s, s, 3}, Data: make([]byte, 3*s*s)},
	}
	outs, err = boxes.Run(ctx, empty, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Shape[0] != 0 || len(o.Data) != 0 {
			t.Errorf("output %s of an empty map: shape %v, %d bytes; want 0 rows", o.Name, o.Shape, len(o.Data))
		}
	}
}

func TestRotateModule(t *testing.T) {
	e, _ := New(Options{})
	m, err := e.Load(OCRRotate, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := e.OCR().RecWidth
	per := 3 * CropHeight * w
	crop := newFloats(2 * per)
	for i := range crop.f {
		crop.f[i] = float32(i%7) / 7
	}
	cls := newFloats(4)
	copy(cls.f, []float32{0.99, 0.01, 0.02, 0.98}) // item 1 is upside down
	widths := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 100), 200)
	box := api.Tensor{Name: NameBox, Datatype: "FP32", Shape: []int64{2, 8}, Data: make([]byte, 64)}
	outs, err := m.Run(context.Background(), []api.Tensor{
		{Name: NameCls, Datatype: "FP32", Shape: []int64{2, 2}, Data: cls.b},
		{Name: NameCrop, Datatype: "FP32", Shape: []int64{2, 3, CropHeight, int64(w)}, Data: crop.b},
		{Name: NameCropWidth, Datatype: "INT32", Shape: []int64{2, 1}, Data: widths},
		box,
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range outs {
		names = append(names, o.Name)
	}
	if diff := cmp.Diff([]string{NameX, NameFlipped, NameBox}, names); diff != "" {
		t.Fatalf("outputs (-want +got):\n%s", diff)
	}
	if !bytes.Equal(outs[1].Data, []byte{0, 1}) {
		t.Errorf("flipped %v; want [0 1]", outs[1].Data)
	}
	x := floatsOf(outs[0].Data)
	want := append([]float32(nil), crop.f[per:]...)
	Rotate180(want, w, 200)
	if !cmp.Equal(x[:per], crop.f[:per]) || !cmp.Equal(x[per:], want) {
		t.Errorf("item 0 must be unchanged and item 1 turned over within its 200 columns")
	}
}

func BenchmarkBoxes(b *testing.B) {
	o := DefaultOCR()
	p := rectMap(640, 640, Box{CX: 300, CY: 200, Width: 400, Height: 30, Angle: 0.05})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o.Boxes(p, 640, 640)
	}
}

func BenchmarkPre(b *testing.B) {
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 480, 160))
	png.Encode(&buf, img)
	e, _ := New(Options{})
	m, _ := e.Load(OCRPre, 1, 1)
	in := []api.Tensor{bytesTensor(NameImage, buf.Bytes())}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Run(context.Background(), in, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzPre: ocr-pre takes outside bytes; whatever they are, it answers outputs of
// the documented shapes or an ErrInvalidInput, never a panic.
func FuzzPre(f *testing.F) {
	var buf bytes.Buffer
	png.Encode(&buf, image.NewGray(image.Rect(0, 0, 7, 3)))
	f.Add(buf.Bytes())
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Add([]byte{})
	e, _ := New(Options{OCR: OCR{DetSize: 64, ClsWidth: 16, RecWidth: 16, Threshold: 0.3, BoxThreshold: 0.6, UnclipRatio: 2, MinSide: 3, MaxBoxes: 5, FlipThreshold: 0.9}})
	m, _ := e.Load(OCRPre, 1, 1)
	f.Fuzz(func(t *testing.T, b []byte) {
		outs, err := m.Run(context.Background(), []api.Tensor{bytesTensor(NameImage, b)}, 1)
		if err != nil {
			if !errors.Is(err, backends.ErrInvalidInput) {
				t.Fatalf("error %v does not wrap ErrInvalidInput", err)
			}
			return
		}
		if len(outs) != 3 || outs[0].Shape[2] != 64 || len(outs[1].Data) != 64*64*3 {
			t.Fatalf("outputs %+v", outs)
		}
	})
}

func TestDecodeImageTooLarge(t *testing.T) {
	// A PNG header claiming 100000×100000 pixels.
	var buf bytes.Buffer
	png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1)))
	b := buf.Bytes()
	binary.BigEndian.PutUint32(b[16:], 100000) // IHDR width
	binary.BigEndian.PutUint32(b[20:], 100000) // IHDR height
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	if _, err := DecodeImage(b); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "pixels") {
		t.Errorf("DecodeImage(huge header) = %v; want ErrBadImage naming the pixel limit", err)
	}
}
