package process

import (
	"fmt"
	"path/filepath"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/fused"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// ExecutorKind builds one kind of executor (--executor) from the options and
// the loaded config (its profiles: sim): a strategy of an ExecutorRegistry.
// Immutable.
type ExecutorKind struct {
	name  string
	build func(o Options, cfg *api.Config) (backends.Executor, error)
}

// NewExecutorKind returns the kind called name, built by build: how a test or
// a main offers an executor of its own (BuiltinExecutors().With).
func NewExecutorKind(name string, build func(o Options, cfg *api.Config) (backends.Executor, error)) ExecutorKind {
	return ExecutorKind{name: name, build: build}
}

// Name is the --executor value that chooses the kind.
func (k ExecutorKind) Name() string { return k.name }

// Build returns a new executor of this kind; errors are the kind's own (a
// model directory, a library, a config without profiles...).
func (k ExecutorKind) Build(o Options, cfg *api.Config) (backends.Executor, error) {
	return k.build(o, cfg)
}

// ExecutorRegistry holds the executor kinds --executor may name: a
// registry.Registry, the one shape of every strategy registry. Immutable.
type ExecutorRegistry = registry.Registry[ExecutorKind]

// BuiltinExecutors returns a registry of the executors this binary offers, in
// the order of their names: builtin, ocr, onnx and sim (--executor's default).
// Registered by hand: the whole set is here.
func BuiltinExecutors() *ExecutorRegistry {
	return registry.Must(registry.New("executor", "executors",
		NewExecutorKind("builtin", func(o Options, _ *api.Config) (backends.Executor, error) {
			return builtin.New(builtin.Options{Dictionary: filepath.Join(o.ModelDir, "ppocr_keys_v1.txt")})
		}),
		// ocr: the OCR session's Go processing modules and ONNX models in one
		// process, and fused chains of them (docs/fusion.md).
		NewExecutorKind("ocr", func(o Options, _ *api.Config) (backends.Executor, error) {
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
		}),
		NewExecutorKind("onnx", func(o Options, _ *api.Config) (backends.Executor, error) { return newONNXExecutor(o) }),
		NewExecutorKind("sim", func(o Options, cfg *api.Config) (backends.Executor, error) {
			return sim.New(o.Hardware, cfg.Profiles, sim.Options{Jitter: o.Jitter, Seed: o.Seed})
		}),
	)) // four constant, distinct names (TestBuiltinExecutors)
}

// ExecutorNames lists the built-in executors' names, comma-separated: the
// allowed --executor values.
func ExecutorNames() string { return BuiltinExecutors().String() }

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
