package process

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/fused"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// Executors builds an executor by name (--executor) from the options and the
// loaded config (its profiles: sim). Registered by hand: the whole set is here.
var Executors = map[string]func(o Options, cfg *api.Config) (backends.Executor, error){
	"sim": func(o Options, cfg *api.Config) (backends.Executor, error) {
		return sim.New(o.Hardware, cfg.Profiles, sim.Options{Jitter: o.Jitter, Seed: o.Seed})
	},
	"onnx": func(o Options, _ *api.Config) (backends.Executor, error) { return newONNXExecutor(o) },
	"builtin": func(o Options, _ *api.Config) (backends.Executor, error) {
		return builtin.New(builtin.Options{Dictionary: filepath.Join(o.ModelDir, "ppocr_keys_v1.txt")})
	},
	// ocr: the OCR session's Go processing modules and ONNX models in one process,
	// and fused chains of them (docs/fusion.md).
	"ocr": func(o Options, _ *api.Config) (backends.Executor, error) {
		b, err := builtin.New(builtin.Options{Dictionary: filepath.Join(o.ModelDir, "ppocr_keys_v1.txt")})
		if err != nil {
			return nil, err
		}
		x, err := newONNXExecutor(o)
		if err != nil {
			return nil, err
		}
		u, err := backends.NewUnion(b, x)
		if err != nil {
			return nil, err
		}
		return fused.New(u, fused.OCRChains()...)
	},
}

// ExecutorNames lists Executors' names, sorted, comma-separated: the allowed
// --executor values.
func ExecutorNames() string {
	names := make([]string, 0, len(Executors))
	for n := range Executors {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// newONNXExecutor runs the models of --model-dir, the OCR models at the fixed
// shapes the builtin OCR steps pad to (backends/onnx/doc.go: padding, not buckets).
func newONNXExecutor(o Options) (*onnx.Executor, error) {
	if o.IntraOpThreads < 1 {
		return nil, fmt.Errorf("--intra-op-threads %d: want ≥ 1", o.IntraOpThreads)
	}
	ocr := builtin.DefaultOCR()
	return onnx.New(onnx.Options{
		Library: o.ORTLib, ModelDir: o.ModelDir, IntraOpThreads: o.IntraOpThreads, DeviceLanes: o.DeviceLanes, PassThrough: true,
		Shapes: ocr.ONNXShapes(), Resized: resizedOf(ocr.ONNXVariants()),
	})
}

// resizedOf turns the OCR variants into the onnx executor's Resized models.
func resizedOf(vs map[string]builtin.ONNXVariant) map[string]onnx.Resized {
	out := make(map[string]onnx.Resized, len(vs))
	for name, v := range vs {
		out[name] = onnx.Resized(v)
	}
	return out
}
