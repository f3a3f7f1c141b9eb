package builtin

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Platform is what ModelMetadata reports as the platform of a builtin model.
const Platform = "piccolo_builtin"

// Model names of the OCR processing steps.
const (
	OCRPre    = "ocr-pre"
	OCRBoxes  = "ocr-boxes"
	OCRRotate = "ocr-rotate"
	OCRCTC    = "ocr-ctc"
)

// Tensor names of the OCR steps. The model tensors (NameDet, NameCls,
// NameRec, and "x", the input of all three) are PaddleOCR v4's.
const (
	NameImage     = "image"            // BYTES [n]: one encoded image (PNG, JPEG, GIF) per item
	NameX         = "x"                // FP32: the next model's input
	NameCanvas    = "canvas"           // UINT8 [n, S, S, 3]: the image on the det canvas, RGB
	NameScale     = "scale"            // FP32 [n, 1]: canvas pixels per image pixel (≤ 1)
	NameDet       = "sigmoid_0.tmp_0"  // FP32 [n, 1, S, S]: text probability per pixel
	NameCls       = "softmax_0.tmp_0"  // FP32 [n, 2]: probability of 0° and 180°
	NameRec       = "softmax_11.tmp_0" // FP32 [n, W/8, 6625]: class probabilities per step
	NameCrop      = "crop"             // FP32 [k, 3, 48, RecWidth]: rec crop of each box
	NameCropWidth = "crop_width"       // INT32 [k, 1]: content width of the rec crop
	NameBox       = "box"              // FP32 [k, 8]: corners x,y (TL, TR, BR, BL) in image pixels
	NameBoxScore  = "box_score"        // FP32 [k, 1]: mean det probability of the box
	NameFlipped   = "flipped"          // BOOL [n, 1]: the crop was turned over
	NameText      = "text"             // BYTES [n]: the text read
	NameTextScore = "text_score"       // FP32 [n]: mean probability of its characters
)

// DefaultMaxBatch is the max batch a model is loaded with when Load is given 0
// (ocr-boxes always runs one image at a time).
const DefaultMaxBatch = 8

// Options configure an Executor.
type Options struct {
	// OCR holds the processing settings; the zero value means DefaultOCR().
	OCR OCR
	// Dictionary is the path of the rec model's character dictionary
	// (ppocr_keys_v1.txt), needed by ocr-ctc; without it ocr-ctc is not offered.
	Dictionary string
}

// Executor runs Piccolo's processing modules, written in Go, on the CPU. It is
// immutable after New and safe for concurrent use.
type Executor struct {
	ocr    OCR
	labels []string // CTC labels; nil: no ocr-ctc
	models []string
}

var _ backends.Executor = (*Executor)(nil)

// New validates the options and reads the dictionary.
func New(opts Options) (*Executor, error) {
	o := opts.OCR
	if o == (OCR{}) {
		o = DefaultOCR()
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("builtin: %w", err)
	}
	e := &Executor{ocr: o}
	if opts.Dictionary != "" {
		labels, err := LoadDictionary(opts.Dictionary)
		if err != nil {
			return nil, fmt.Errorf("builtin: %w", err)
		}
		e.labels = labels
		e.models = []string{OCRBoxes, OCRCTC, OCRPre, OCRRotate}
	} else {
		e.models = []string{OCRBoxes, OCRPre, OCRRotate}
	}
	return e, nil
}

// Models lists the processing modules, sorted.
func (e *Executor) Models() []string { return e.models }

// OCR returns the processing settings.
func (e *Executor) OCR() OCR { return e.ocr }

// Labels returns the CTC labels (blank, the dictionary, space); nil without a dictionary.
func (e *Executor) Labels() []string { return e.labels }

// Load returns the processing module with up to batch items a call (0:
// DefaultMaxBatch; ocr-boxes takes 1 only) on concurrency lanes (0: 1).
// Errors wrap backends.ErrUnknownModel or backends.ErrInvalidInput.
func (e *Executor) Load(model string, batch, concurrency int) (backends.Model, error) {
	if batch < 0 || concurrency < 0 {
		return nil, fmt.Errorf("%w: %q: batch %d, concurrency %d; want ≥ 1 (0: the default)", backends.ErrInvalidInput, model, batch, concurrency)
	}
	if concurrency == 0 {
		concurrency = 1
	}
	if batch == 0 {
		batch = DefaultMaxBatch
		if model == OCRBoxes {
			batch = 1
		}
	}
	o := e.ocr
	s, cw, rw := int64(o.DetSize), int64(o.ClsWidth), int64(o.RecWidth)
	m := &module{e: e, lanes: make(chan struct{}, concurrency), info: backends.ModelInfo{
		Name: model, Platform: Platform, MaxBatch: batch, Concurrency: concurrency,
	}}
	spec := func(name, dt string, shape ...int64) backends.TensorSpec {
		return backends.TensorSpec{Name: name, Datatype: dt, Shape: shape}
	}
	switch model {
	case OCRPre:
		m.run = e.runPre
		m.info.Inputs = []backends.TensorSpec{spec(NameImage, "BYTES", -1)}
		m.info.Outputs = []backends.TensorSpec{spec(NameX, "FP32", -1, 3, s, s), spec(NameCanvas, "UINT8", -1, s, s, 3), spec(NameScale, "FP32", -1, 1)}
	case OCRBoxes:
		if batch != 1 {
			return nil, fmt.Errorf("%w: %q: batch %d; ocr-boxes runs one image a call (batch 1): its outputs have one row per box found", backends.ErrInvalidInput, model, batch)
		}
		m.run = e.runBoxes
		m.info.AnyInputs = true // scale is optional
		m.info.FanOut = true    // k rows out, one per box found
		m.info.Inputs = []backends.TensorSpec{spec(NameDet, "FP32", -1, 1, s, s), spec(NameCanvas, "UINT8", -1, s, s, 3)}
		m.info.Outputs = []backends.TensorSpec{spec(NameX, "FP32", -1, 3, CropHeight, cw), spec(NameCrop, "FP32", -1, 3, CropHeight, rw),
			spec(NameCropWidth, "INT32", -1, 1), spec(NameBox, "FP32", -1, 8), spec(NameBoxScore, "FP32", -1, 1)}
	case OCRRotate:
		m.run = e.runRotate
		m.info.AnyInputs = true // others pass through
		m.info.Inputs = []backends.TensorSpec{spec(NameCls, "FP32", -1, 2), spec(NameCrop, "FP32", -1, 3, CropHeight, rw), spec(NameCropWidth, "INT32", -1, 1)}
		m.info.Outputs = []backends.TensorSpec{spec(NameX, "FP32", -1, 3, CropHeight, rw), spec(NameFlipped, "BOOL", -1, 1)}
	case OCRCTC:
		if e.labels == nil {
			return nil, fmt.Errorf("%w: %q needs the dictionary; start the executor with one", backends.ErrUnknownModel, model)
		}
		m.run = e.runCTC
		m.info.AnyInputs = true // others pass through
		m.info.Inputs = []backends.TensorSpec{spec(NameRec, "FP32", -1, -1, int64(len(e.labels)))}
		m.info.Outputs = []backends.TensorSpec{spec(NameText, "BYTES", -1), spec(NameTextScore, "FP32", -1)}
	default:
		return nil, fmt.Errorf("%w: %q is not a builtin module; modules: %s", backends.ErrUnknownModel, model, strings.Join(e.models, ", "))
	}
	return m, nil
}

// module is one loaded processing module: a function and a lane semaphore.
type module struct {
	e     *Executor
	info  backends.ModelInfo
	run   func(inputs []api.Tensor, n int) ([]api.Tensor, error)
	lanes chan struct{}
}

var _ backends.Model = (*module)(nil)

func (m *module) Info() backends.ModelInfo { return m.info }
func (m *module) Close() error             { return nil }

// Run checks the inputs against Info and runs the step on a free lane.
func (m *module) Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	if n < 1 || n > m.info.MaxBatch {
		return nil, fmt.Errorf("%w: batch of %d items; the loaded max batch is %d", backends.ErrInvalidInput, n, m.info.MaxBatch)
	}
	for _, s := range m.info.Inputs {
		if err := check(inputs, s, n); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", backends.ErrInvalidInput, m.info.Name, err)
		}
	}
	select {
	case m.lanes <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-m.lanes }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.run(inputs, n)
}

// check finds the input of spec and checks its datatype, rank, fixed dimensions,
// dimension 0 and size.
func check(inputs []api.Tensor, s backends.TensorSpec, n int) error {
	t := find(inputs, s.Name)
	if t == nil {
		return fmt.Errorf("input %q is missing", s.Name)
	}
	if t.Datatype != s.Datatype {
		return fmt.Errorf("input %q is %s; want %s", s.Name, t.Datatype, s.Datatype)
	}
	bad := len(t.Shape) != len(s.Shape) || t.Shape[0] != int64(n)
	for i := 1; !bad && i < len(s.Shape); i++ {
		bad = s.Shape[i] >= 0 && t.Shape[i] != s.Shape[i]
	}
	if bad {
		return fmt.Errorf("input %q has shape %v; want %v with %d items", s.Name, t.Shape, s.Shape, n)
	}
	return t.Validate()
}

func find(ts []api.Tensor, name string) *api.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// passThrough appends a copy of every input that is not consumed nor already out.
func passThrough(outs, inputs []api.Tensor, consumed ...string) []api.Tensor {
next:
	for i := range inputs {
		t := &inputs[i]
		for _, c := range consumed {
			if t.Name == c {
				continue next
			}
		}
		if find(outs, t.Name) != nil {
			continue
		}
		outs = append(outs, api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: append([]int64(nil), t.Shape...), Data: append([]byte(nil), t.Data...)})
	}
	return outs
}

// runPre decodes each image and writes the det input, the canvas and the scale.
func (e *Executor) runPre(inputs []api.Tensor, n int) ([]api.Tensor, error) {
	in := find(inputs, NameImage)
	offs, err := in.RowOffsets(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", backends.ErrInvalidInput, err)
	}
	s := e.ocr.DetSize
	x := newFloats(n * 3 * s * s)
	canvas := make([]uint8, n*s*s*3)
	scales := newFloats(n)
	for i := 0; i < n; i++ {
		row := in.Data[offs[i]:offs[i+1]]
		if len(row) < 4 {
			return nil, fmt.Errorf("%w: item %d: no image", backends.ErrInvalidInput, i)
		}
		img, err := DecodeImage(row[4:])
		if err != nil {
			return nil, fmt.Errorf("%w: item %d: %v", backends.ErrInvalidInput, i, err)
		}
		c, scale := Canvas(img, s, canvas[i*s*s*3:(i+1)*s*s*3])
		DetInput(c, s, x.f[i*3*s*s:(i+1)*3*s*s])
		scales.f[i] = float32(scale)
	}
	return []api.Tensor{
		{Name: NameX, Datatype: "FP32", Shape: []int64{int64(n), 3, int64(s), int64(s)}, Data: x.b},
		{Name: NameCanvas, Datatype: "UINT8", Shape: []int64{int64(n), int64(s), int64(s), 3}, Data: canvas},
		{Name: NameScale, Datatype: "FP32", Shape: []int64{int64(n), 1}, Data: scales.b},
	}, nil
}

// runBoxes finds the boxes of one image and crops each for cls and rec.
func (e *Executor) runBoxes(inputs []api.Tensor, _ int) ([]api.Tensor, error) {
	o := e.ocr
	s := o.DetSize
	prob := floatsOf(find(inputs, NameDet).Data)
	canvas := find(inputs, NameCanvas).Data
	scale := float32(1)
	if t := find(inputs, NameScale); t != nil && t.Datatype == "FP32" && len(t.Data) == 4 {
		scale = math.Float32frombits(binary.LittleEndian.Uint32(t.Data))
	}
	if !(scale > 0 && scale <= 1) {
		return nil, fmt.Errorf("%w: scale %v; want 0 < scale ≤ 1", backends.ErrInvalidInput, scale)
	}
	boxes := o.Boxes(prob, s, s)
	k := len(boxes)
	clsPer, recPer := 3*CropHeight*o.ClsWidth, 3*CropHeight*o.RecWidth
	cls, rec := newFloats(k*clsPer), newFloats(k*recPer)
	widths := make([]byte, 4*k)
	corners, scores := newFloats(8*k), newFloats(k)
	for i, b := range boxes {
		Crop(canvas, s, s, b, o.ClsWidth, cls.f[i*clsPer:(i+1)*clsPer])
		cw := Crop(canvas, s, s, b, o.RecWidth, rec.f[i*recPer:(i+1)*recPer])
		binary.LittleEndian.PutUint32(widths[4*i:], uint32(cw))
		for j, c := range b.Corners() {
			corners.f[8*i+j] = float32(c) / scale
		}
		scores.f[i] = float32(b.Score)
	}
	kk := int64(k)
	return []api.Tensor{
		{Name: NameX, Datatype: "FP32", Shape: []int64{kk, 3, CropHeight, int64(o.ClsWidth)}, Data: cls.b},
		{Name: NameCrop, Datatype: "FP32", Shape: []int64{kk, 3, CropHeight, int64(o.RecWidth)}, Data: rec.b},
		{Name: NameCropWidth, Datatype: "INT32", Shape: []int64{kk, 1}, Data: widths},
		{Name: NameBox, Datatype: "FP32", Shape: []int64{kk, 8}, Data: corners.b},
		{Name: NameBoxScore, Datatype: "FP32", Shape: []int64{kk, 1}, Data: scores.b},
	}, nil
}

// runRotate turns over the rec crops the direction classifier reads as 180°.
func (e *Executor) runRotate(inputs []api.Tensor, n int) ([]api.Tensor, error) {
	probs := floatsOf(find(inputs, NameCls).Data)
	crop := find(inputs, NameCrop)
	widths := find(inputs, NameCropWidth).Data
	w := e.ocr.RecWidth
	per := 3 * CropHeight * w
	x := newFloats(n * per)
	copy(x.b, crop.Data)
	flipped := make([]byte, n)
	for i := 0; i < n; i++ {
		if float64(probs[2*i+1]) >= e.ocr.FlipThreshold {
			Rotate180(x.f[i*per:(i+1)*per], w, int(int32(binary.LittleEndian.Uint32(widths[4*i:]))))
			flipped[i] = 1
		}
	}
	outs := []api.Tensor{
		{Name: NameX, Datatype: "FP32", Shape: []int64{int64(n), 3, CropHeight, int64(w)}, Data: x.b},
		{Name: NameFlipped, Datatype: "BOOL", Shape: []int64{int64(n), 1}, Data: flipped},
	}
	return passThrough(outs, inputs, NameCls, NameCrop, NameCropWidth, NameX), nil
}

var builders = sync.Pool{New: func() any { return new(strings.Builder) }}

// runCTC decodes the rec model's output into text.
func (e *Executor) runCTC(inputs []api.Tensor, n int) ([]api.Tensor, error) {
	in := find(inputs, NameRec)
	T, C := int(in.Shape[1]), int(in.Shape[2])
	probs := floatsOf(in.Data)
	sb := builders.Get().(*strings.Builder)
	defer builders.Put(sb)
	var text []byte
	scores := newFloats(n)
	for i := 0; i < n; i++ {
		s, score := CTCDecode(probs[i*T*C:(i+1)*T*C], T, C, e.labels, sb)
		text = binary.LittleEndian.AppendUint32(text, uint32(len(s)))
		text = append(text, s...)
		scores.f[i] = score
	}
	outs := []api.Tensor{
		{Name: NameText, Datatype: "BYTES", Shape: []int64{int64(n)}, Data: text},
		{Name: NameTextScore, Datatype: "FP32", Shape: []int64{int64(n)}, Data: scores.b},
	}
	return passThrough(outs, inputs, NameRec), nil
}

// floats is a float32 slice and the same memory as little-endian bytes.
type floats struct {
	f []float32
	b []byte
}

func newFloats(n int) floats {
	f := make([]float32, n)
	return floats{f: f, b: bytesOf(f)}
}

func bytesOf(f []float32) []byte {
	if len(f) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// floatsOf views little-endian FP32 bytes as floats, copying only when the bytes
// are not 4-byte aligned.
func floatsOf(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
