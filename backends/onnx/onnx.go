package onnx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Platform is what ModelMetadata reports as the platform of an onnx model
// (Triton's name for the same runtime).
const Platform = "onnxruntime_onnx"

// DefaultMaxBatch is the max batch a model is loaded with when Load is given 0.
const DefaultMaxBatch = 8

// ErrClosed: the model was closed (unloaded or replaced) while the batch waited
// for a lane. It also wraps backends.ErrModelNotLoaded.
var ErrClosed = errors.New("onnx model closed")

// Options configure an Executor.
type Options struct {
	// Library is the path of the ONNX Runtime shared library
	// (libonnxruntime.so.1). Required. The first Executor of the process opens
	// it; later ones must name the same file.
	Library string
	// ModelDir holds the models as <name>.onnx. Required.
	ModelDir string
	// IntraOpThreads is the number of threads one ONNX Runtime call uses, per
	// lane (1 when 0). Inter-op threads are 1, and idle threads do not spin, so
	// lanes × IntraOpThreads is the number of cores the model keeps busy.
	IntraOpThreads int
	// Shapes fixes, by model, the item shape (without the batch dimension) of the
	// model's only input, e.g. {"ocr-det": {3, 640, 640}}. Such a model reports
	// that shape in Info and is warmed up at it on every lane by Load.
	Shapes map[string][]int64
	// Resized serves, by model name, variants of other models: the same .onnx
	// file at another input size (Resized), offered as if <ModelDir>/<name>.onnx
	// existed. Its served shape is Shapes[name], else its file's.
	Resized map[string]Resized
	// PassThrough makes Run return, after the model's outputs, a copy of every
	// input the model does not consume (and whose name is not one of its outputs).
	PassThrough bool
	// DeviceLanes, when > 0, is how many batches run at once across every
	// model the executor loads: the device is DeviceLanes × IntraOpThreads
	// cores, as its profiles assume (each model's lanes alone would let one
	// lane a model run at once: a backend serving det, a det variant and the
	// per-box chain kept three threads busy on a one-thread type). Batches
	// beyond it wait, in FIFO order. 0: no limit beyond each model's lanes.
	DeviceLanes int
}

// Executor runs the ONNX models of one directory with ONNX Runtime on the CPU.
// It is immutable after New and safe for concurrent use.
type Executor struct {
	opts   Options
	models []string      // sorted
	device chan struct{} // a token per device lane (Options.DeviceLanes); nil: no limit
}

var _ backends.Executor = (*Executor)(nil)

// env guards the process-wide ONNX Runtime environment: one library, opened once.
var env struct {
	sync.Mutex
	library string
}

func initEnvironment(library string) error {
	env.Lock()
	defer env.Unlock()
	if ort.IsInitialized() {
		if env.library != library {
			return fmt.Errorf("onnx: ONNX Runtime is already initialized from %s in this process; cannot also use %s", env.library, library)
		}
		return nil
	}
	if _, err := os.Stat(library); err != nil {
		return fmt.Errorf("onnx: ONNX Runtime library: %w (run `make models` to fetch it)", err)
	}
	ort.SetSharedLibraryPath(library)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("onnx: initializing ONNX Runtime from %s: %w", library, err)
	}
	env.library = library
	return nil
}

// New returns an Executor of the .onnx files in opts.ModelDir, opening the ONNX
// Runtime library if this process has not yet. It errors when the library or the
// directory is missing, when the directory has no .onnx file, when the library
// fails to load, or when IntraOpThreads is negative.
func New(opts Options) (*Executor, error) {
	if opts.Library == "" {
		return nil, errors.New("onnx: no ONNX Runtime library given: set the path of libonnxruntime.so.1 (`make models` prints it)")
	}
	if opts.ModelDir == "" {
		return nil, errors.New("onnx: no model directory given: set the directory of the <model>.onnx files (`make models` prints it)")
	}
	if opts.IntraOpThreads < 0 {
		return nil, fmt.Errorf("onnx: intra-op threads %d; want ≥ 1 (0 means 1)", opts.IntraOpThreads)
	}
	if opts.IntraOpThreads == 0 {
		opts.IntraOpThreads = 1
	}
	if opts.DeviceLanes < 0 {
		return nil, fmt.Errorf("onnx: device lanes %d; want ≥ 1 (0: no limit)", opts.DeviceLanes)
	}
	files, err := filepath.Glob(filepath.Join(opts.ModelDir, "*.onnx"))
	if err != nil {
		return nil, fmt.Errorf("onnx: model directory %s: %w", opts.ModelDir, err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(opts.ModelDir); err != nil {
			return nil, fmt.Errorf("onnx: model directory: %w (run `make models` to fetch the models)", err)
		}
		return nil, fmt.Errorf("onnx: model directory %s has no .onnx file", opts.ModelDir)
	}
	e := &Executor{opts: opts}
	if opts.DeviceLanes > 0 {
		e.device = make(chan struct{}, opts.DeviceLanes)
	}
	for _, f := range files {
		e.models = append(e.models, strings.TrimSuffix(filepath.Base(f), ".onnx"))
	}
	sort.Strings(e.models)
	files = e.models
	for name, r := range opts.Resized {
		i := sort.SearchStrings(files, r.File)
		if i == len(files) || files[i] != r.File {
			return nil, fmt.Errorf("onnx: variant %q runs %s.onnx, which is not in %s; models: %s", name, r.File, opts.ModelDir, strings.Join(files, ", "))
		}
		if opts.Shapes[name] == nil && opts.Shapes[r.File] == nil {
			return nil, fmt.Errorf("onnx: variant %q of %s needs its served input shape in Shapes (under its name or %s's)", name, r.File, r.File)
		}
		e.models = append(e.models, name)
	}
	e.models = slices.Clone(e.models)
	sort.Strings(e.models)
	for m := range opts.Shapes {
		if !e.knows(m) {
			return nil, fmt.Errorf("onnx: shape given for model %q, which is not in %s; models: %s", m, opts.ModelDir, strings.Join(e.models, ", "))
		}
	}
	if err := initEnvironment(opts.Library); err != nil {
		return nil, err
	}
	return e, nil
}

// Models lists the models of the directory, sorted.
func (e *Executor) Models() []string { return e.models }

// IntraOpThreads returns the threads of one call, per lane.
func (e *Executor) IntraOpThreads() int { return e.opts.IntraOpThreads }

// shape returns the fixed item shape model is served at: Options.Shapes[model],
// or for a Resized model its file's; nil when none is fixed.
func (e *Executor) shape(model string) []int64 {
	if s, ok := e.opts.Shapes[model]; ok {
		return s
	}
	if r, ok := e.opts.Resized[model]; ok {
		return e.opts.Shapes[r.File]
	}
	return nil
}

func (e *Executor) knows(model string) bool {
	i := sort.SearchStrings(e.models, model)
	return i < len(e.models) && e.models[i] == model
}

// Load opens concurrency sessions (lanes) of model that run batches of up to
// batch items (0: DefaultMaxBatch; 0 concurrency: 1), and warms them up when
// Options.Shapes fixes the model's input shape. Errors wrap
// backends.ErrUnknownModel, backends.ErrInvalidInput (a negative setting, a batch
// beyond a fixed batch dimension, a shape that does not fit the model, a datatype
// the executor does not carry) or ONNX Runtime's error.
func (e *Executor) Load(model string, batch, concurrency int) (backends.Model, error) {
	if !e.knows(model) {
		return nil, fmt.Errorf("%w: %q is not in %s; models: %s", backends.ErrUnknownModel, model, e.opts.ModelDir, strings.Join(e.models, ", "))
	}
	if batch < 0 || concurrency < 0 {
		return nil, fmt.Errorf("%w: %q: batch %d, concurrency %d; want ≥ 1 (0: the default)", backends.ErrInvalidInput, model, batch, concurrency)
	}
	if batch == 0 {
		batch = DefaultMaxBatch
	}
	if concurrency == 0 {
		concurrency = 1
	}
	file := model
	var rs *resizer
	if r, ok := e.opts.Resized[model]; ok {
		var err error
		if rs, err = newResizer(model, r, e.shape(model)); err != nil {
			return nil, err
		}
		file = r.File
	}
	path := filepath.Join(e.opts.ModelDir, file+".onnx")
	so, err := e.sessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: %q: %w", model, err)
	}
	defer so.Destroy()
	ins, outs, err := ort.GetInputOutputInfoWithOptions(path, so)
	if err != nil {
		return nil, fmt.Errorf("onnx: %q: reading %s: %w", model, path, err)
	}
	m := &onnxModel{
		info: backends.ModelInfo{
			Name: model, Platform: Platform, MaxBatch: batch, Concurrency: concurrency, AnyInputs: true,
		},
		passThrough: e.opts.PassThrough,
		resize:      rs,
		lanes:       make(chan *lane, concurrency),
		closed:      make(chan struct{}),
		device:      e.device,
	}
	if m.info.Inputs, m.inTypes, err = specs(model, "input", ins, batch); err != nil {
		return nil, err
	}
	if m.info.Outputs, _, err = specs(model, "output", outs, batch); err != nil {
		return nil, err
	}
	if shape := e.shape(model); shape != nil {
		check := shape
		if rs != nil {
			check = e.opts.Resized[model].Input // the file must take the size it runs at
		}
		if err := fixShape(model, &m.info.Inputs, check); err != nil {
			return nil, err
		}
		m.info.Inputs[0].Shape = append([]int64{-1}, shape...)
	}
	inNames := make([]string, len(ins))
	for i, in := range ins {
		inNames[i] = in.Name
	}
	outNames := make([]string, len(outs))
	for i, out := range outs {
		outNames[i] = out.Name
	}
	for i := 0; i < concurrency; i++ {
		l, err := newLane(path, inNames, outNames, so)
		if err != nil {
			m.destroyLanes()
			return nil, fmt.Errorf("onnx: %q: lane %d: %w", model, i, err)
		}
		m.lanes <- l
		m.made++
	}
	if e.shape(model) != nil {
		if err := m.warmUp(); err != nil {
			m.destroyLanes()
			return nil, fmt.Errorf("onnx: %q: warm-up: %w", model, err)
		}
	}
	return m, nil
}

func (e *Executor) sessionOptions() (*ort.SessionOptions, error) {
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	for _, set := range []func() error{
		func() error { return so.SetIntraOpNumThreads(e.opts.IntraOpThreads) },
		func() error { return so.SetInterOpNumThreads(1) },
		func() error { return so.AddSessionConfigEntry("session.intra_op.allow_spinning", "0") },
	} {
		if err := set(); err != nil {
			so.Destroy()
			return nil, err
		}
	}
	return so, nil
}

// specs turns ONNX Runtime's I/O description into tensor specs with -1 for every
// dynamic dimension and for the batch dimension, and returns the element types.
func specs(model, kind string, infos []ort.InputOutputInfo, batch int) ([]backends.TensorSpec, []ort.TensorElementDataType, error) {
	out := make([]backends.TensorSpec, len(infos))
	types := make([]ort.TensorElementDataType, len(infos))
	for i, info := range infos {
		if info.OrtValueType != ort.ONNXTypeTensor {
			return nil, nil, fmt.Errorf("%w: %q: %s %q is a %s; the onnx executor carries tensors only", backends.ErrInvalidInput, model, kind, info.Name, info.OrtValueType)
		}
		dt, ok := datatypes[info.DataType]
		if !ok {
			return nil, nil, fmt.Errorf("%w: %q: %s %q has element type %s; the onnx executor carries %s", backends.ErrInvalidInput, model, kind, info.Name, info.DataType, supported)
		}
		if len(info.Dimensions) == 0 {
			return nil, nil, fmt.Errorf("%w: %q: %s %q is a scalar; batching needs a batch dimension", backends.ErrInvalidInput, model, kind, info.Name)
		}
		shape := make([]int64, len(info.Dimensions))
		for j, d := range info.Dimensions {
			shape[j] = d
			if d < 0 {
				shape[j] = -1
			}
		}
		if d0 := shape[0]; d0 > 0 && int64(batch) > d0 {
			return nil, nil, fmt.Errorf("%w: %q: %s %q has a fixed batch dimension of %d; batch %d does not fit", backends.ErrInvalidInput, model, kind, info.Name, d0, batch)
		}
		shape[0] = -1
		out[i] = backends.TensorSpec{Name: info.Name, Datatype: dt, Shape: shape}
		types[i] = info.DataType
	}
	return out, types, nil
}

// fixShape sets the item shape of the model's only input after checking that it
// fits the dimensions the model declares.
func fixShape(model string, inputs *[]backends.TensorSpec, item []int64) error {
	if len(*inputs) != 1 {
		return fmt.Errorf("%w: %q: a fixed shape needs a model with one input; it has %d", backends.ErrInvalidInput, model, len(*inputs))
	}
	spec := &(*inputs)[0]
	if len(item) != len(spec.Shape)-1 {
		return fmt.Errorf("%w: %q: shape %v for input %q of shape %v: want %d dimensions after the batch", backends.ErrInvalidInput, model, item, spec.Name, spec.Shape, len(spec.Shape)-1)
	}
	for j, d := range item {
		if d < 1 || (spec.Shape[j+1] > 0 && spec.Shape[j+1] != d) {
			return fmt.Errorf("%w: %q: shape %v for input %q of shape %v: dimension %d must be %s", backends.ErrInvalidInput, model, item, spec.Name, spec.Shape, j+1, allowedDim(spec.Shape[j+1]))
		}
	}
	spec.Shape = append([]int64{-1}, item...)
	return nil
}

func allowedDim(d int64) string {
	if d > 0 {
		return fmt.Sprint(d)
	}
	return "≥ 1"
}

// datatypes maps the ONNX element types the executor carries to KServe v2 names.
var datatypes = map[ort.TensorElementDataType]string{
	ort.TensorElementDataTypeFloat:  "FP32",
	ort.TensorElementDataTypeDouble: "FP64",
	ort.TensorElementDataTypeInt8:   "INT8",
	ort.TensorElementDataTypeInt16:  "INT16",
	ort.TensorElementDataTypeInt32:  "INT32",
	ort.TensorElementDataTypeInt64:  "INT64",
	ort.TensorElementDataTypeUint8:  "UINT8",
	ort.TensorElementDataTypeUint16: "UINT16",
	ort.TensorElementDataTypeUint32: "UINT32",
	ort.TensorElementDataTypeUint64: "UINT64",
	ort.TensorElementDataTypeBool:   "BOOL",
}

const supported = "FP32, FP64, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL"

// lane is one ONNX Runtime session with its reusable buffers. One Run holds it
// at a time.
type lane struct {
	sess     *ort.DynamicAdvancedSession
	run      *ort.RunOptions
	in       []ort.Value
	out      []ort.Value
	buf      [][]byte      // per input: an 8-byte aligned copy of the batch
	src      []byte        // a Resized model's aligned copy of its input before resizing
	shape    [][]int64     // per input
	termDone chan struct{} // the terminate callback has finished
}

func newLane(path string, inNames, outNames []string, so *ort.SessionOptions) (*lane, error) {
	sess, err := ort.NewDynamicAdvancedSession(path, inNames, outNames, so)
	if err != nil {
		return nil, err
	}
	run, err := ort.NewRunOptions()
	if err != nil {
		sess.Destroy()
		return nil, err
	}
	return &lane{
		sess: sess, run: run,
		in: make([]ort.Value, len(inNames)), out: make([]ort.Value, len(outNames)),
		buf: make([][]byte, len(inNames)), shape: make([][]int64, len(inNames)),
		termDone: make(chan struct{}, 1),
	}, nil
}

func (l *lane) destroy() {
	l.sess.Destroy()
	l.run.Destroy()
}

// onnxModel is one loaded model: its lanes, handed out through a channel (blocked
// Runs are served in FIFO order).
type onnxModel struct {
	info        backends.ModelInfo
	inTypes     []ort.TensorElementDataType
	passThrough bool
	resize      *resizer // nil: the file runs at the served shape
	lanes       chan *lane
	closed      chan struct{}
	closeOnce   sync.Once
	made        int           // lanes made; set by Load only
	device      chan struct{} // the executor's device lanes (nil: no limit)
}

var _ backends.Model = (*onnxModel)(nil)

func (m *onnxModel) Info() backends.ModelInfo { return m.info }

// Close stops handing out lanes, waits for the calls in flight, and releases the
// sessions.
func (m *onnxModel) Close() error {
	m.closeOnce.Do(func() {
		close(m.closed)
		m.destroyLanes()
	})
	return nil
}

// destroyLanes takes back every lane made (waiting for those in use) and
// destroys it.
func (m *onnxModel) destroyLanes() {
	for i := 0; i < m.made; i++ {
		l := <-m.lanes
		l.destroy()
	}
	m.made = 0
}

// Run runs the batch of n items as one ONNX Runtime call on a free lane.
func (m *onnxModel) Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	out, _, err := m.RunTimed(ctx, inputs, n)
	return out, err
}

var _ backends.TimedModel = (*onnxModel)(nil)

// RunTimed is Run with its Timing: Queue, the wait for a lane of the model
// and of the device (Options.DeviceLanes); Compute, the ONNX Runtime call.
func (m *onnxModel) RunTimed(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, backends.Timing, error) {
	if n < 1 || n > m.info.MaxBatch {
		return nil, backends.Timing{}, fmt.Errorf("%w: batch of %d items; the loaded max batch is %d", backends.ErrInvalidInput, n, m.info.MaxBatch)
	}
	start := time.Now()
	var l *lane
	select {
	case l = <-m.lanes:
	case <-ctx.Done():
		return nil, backends.Timing{}, ctx.Err()
	case <-m.closed:
		return nil, backends.Timing{}, fmt.Errorf("%w (%w)", ErrClosed, backends.ErrModelNotLoaded)
	}
	defer func() { m.lanes <- l }()
	select {
	case <-m.closed:
		return nil, backends.Timing{}, fmt.Errorf("%w (%w)", ErrClosed, backends.ErrModelNotLoaded)
	default:
	}
	if m.device != nil {
		select {
		case m.device <- struct{}{}:
		case <-ctx.Done():
			return nil, backends.Timing{}, ctx.Err()
		}
		defer func() { <-m.device }()
	}
	ran := time.Now()
	out, err := m.runOn(ctx, l, inputs, n)
	return out, backends.Timing{Queue: ran.Sub(start), Compute: max(time.Since(ran), 1)}, err
}

func (m *onnxModel) runOn(ctx context.Context, l *lane, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	defer func() {
		for i, v := range l.in {
			if v != nil {
				v.Destroy()
				l.in[i] = nil
			}
		}
		for i, v := range l.out {
			if v != nil {
				v.Destroy()
				l.out[i] = nil
			}
		}
	}()
	for i, spec := range m.info.Inputs {
		t := find(inputs, spec.Name)
		if t == nil {
			return nil, fmt.Errorf("%w: input %q is missing; the model's inputs: %s", backends.ErrInvalidInput, spec.Name, names(m.info.Inputs))
		}
		if t.Datatype != spec.Datatype {
			return nil, fmt.Errorf("%w: input %q is %s; the model wants %s", backends.ErrInvalidInput, t.Name, t.Datatype, spec.Datatype)
		}
		if len(t.Shape) != len(spec.Shape) || t.Shape[0] != int64(n) {
			return nil, fmt.Errorf("%w: input %q has shape %v; want %d dimensions, %d items in the first", backends.ErrInvalidInput, t.Name, t.Shape, len(spec.Shape), n)
		}
		if len(t.Data) == 0 {
			return nil, fmt.Errorf("%w: input %q of shape %v has no elements", backends.ErrInvalidInput, t.Name, t.Shape)
		}
		if m.resize != nil && i == 0 {
			data, shape, err := m.resize.input(t, n, &l.src, &l.buf[i])
			if err != nil {
				return nil, err
			}
			l.buf[i] = data
			l.shape[i] = append(l.shape[i][:0], shape...)
		} else {
			l.buf[i] = aligned(l.buf[i], len(t.Data))
			copy(l.buf[i], t.Data)
			l.shape[i] = append(l.shape[i][:0], t.Shape...)
		}
		v, err := ort.NewCustomDataTensor(ort.Shape(l.shape[i]), l.buf[i], m.inTypes[i])
		if err != nil {
			return nil, fmt.Errorf("%w: input %q of shape %v: %v", backends.ErrInvalidInput, t.Name, t.Shape, err)
		}
		l.in[i] = v
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			l.run.Terminate()
			l.termDone <- struct{}{}
		})
	}
	err := l.sess.RunWithOptions(l.in, l.out, l.run)
	if stop != nil && !stop() {
		<-l.termDone // the callback ran: wait for it, then clear the flag for the next batch
		l.run.UnsetTerminate()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("onnx runtime: %w", err)
	}
	outs := make([]api.Tensor, 0, len(l.out)+len(inputs))
	for i, v := range l.out {
		t, err := toTensor(m.info.Outputs[i].Name, v)
		if err != nil {
			return nil, err
		}
		if len(t.Shape) == 0 || t.Shape[0] != int64(n) {
			return nil, fmt.Errorf("onnx runtime: output %q has shape %v; want %d items in dimension 0", t.Name, t.Shape, n)
		}
		if m.resize != nil && m.resize.restore && i == 0 {
			if t, err = m.resize.output(t); err != nil {
				return nil, err
			}
		}
		outs = append(outs, t)
	}
	if m.passThrough {
		for i := range inputs {
			t := &inputs[i]
			if find(outs, t.Name) != nil || hasSpec(m.info.Inputs, t.Name) {
				continue
			}
			outs = append(outs, api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: append([]int64(nil), t.Shape...), Data: append([]byte(nil), t.Data...)})
		}
	}
	return outs, nil
}

// warmUp runs every lane once at batch 1 and once at the max batch, with zeros,
// so that the first real batches do not pay for ONNX Runtime's first call at a shape.
func (m *onnxModel) warmUp() error {
	spec := m.info.Inputs[0]
	size := api.ElementSize(spec.Datatype)
	per := int64(size)
	for _, d := range spec.Shape[1:] {
		per *= d
	}
	lanes := make([]*lane, 0, cap(m.lanes))
	defer func() {
		for _, l := range lanes {
			m.lanes <- l
		}
	}()
	for len(lanes) < cap(m.lanes) {
		lanes = append(lanes, <-m.lanes)
	}
	for _, l := range lanes {
		for _, n := range []int{1, m.info.MaxBatch} {
			shape := append([]int64{int64(n)}, spec.Shape[1:]...)
			in := []api.Tensor{{Name: spec.Name, Datatype: spec.Datatype, Shape: shape, Data: make([]byte, int64(n)*per)}}
			if _, err := m.runOn(context.Background(), l, in, n); err != nil {
				return fmt.Errorf("batch %d: %w", n, err)
			}
		}
	}
	return nil
}

// aligned returns buf resized to n bytes, reallocated 8-byte aligned when too small.
func aligned(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf[:n]
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:n]
}

func find(ts []api.Tensor, name string) *api.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

func hasSpec(specs []backends.TensorSpec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

func names(specs []backends.TensorSpec) string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return strings.Join(out, ", ")
}

// toTensor turns an output ONNX Runtime allocated (and onnxruntime_go copied into
// Go memory) into an api.Tensor over the same memory: no further copy.
func toTensor(name string, v ort.Value) (api.Tensor, error) {
	shape := append([]int64(nil), v.GetShape()...)
	var dt string
	var data []byte
	switch t := v.(type) {
	case *ort.Tensor[float32]:
		dt, data = "FP32", asBytes(t.GetData())
	case *ort.Tensor[float64]:
		dt, data = "FP64", asBytes(t.GetData())
	case *ort.Tensor[int8]:
		dt, data = "INT8", asBytes(t.GetData())
	case *ort.Tensor[int16]:
		dt, data = "INT16", asBytes(t.GetData())
	case *ort.Tensor[int32]:
		dt, data = "INT32", asBytes(t.GetData())
	case *ort.Tensor[int64]:
		dt, data = "INT64", asBytes(t.GetData())
	case *ort.Tensor[uint8]:
		dt, data = "UINT8", t.GetData()
	case *ort.Tensor[uint16]:
		dt, data = "UINT16", asBytes(t.GetData())
	case *ort.Tensor[uint32]:
		dt, data = "UINT32", asBytes(t.GetData())
	case *ort.Tensor[uint64]:
		dt, data = "UINT64", asBytes(t.GetData())
	case *ort.Tensor[bool]:
		dt, data = "BOOL", asBytes(t.GetData())
	default:
		return api.Tensor{}, fmt.Errorf("onnx runtime: output %q is a %T; the onnx executor carries %s", name, v, supported)
	}
	return api.Tensor{Name: name, Datatype: dt, Shape: shape, Data: data}, nil
}

// asBytes views a slice of numbers as its little-endian bytes (amd64, arm64).
func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}
