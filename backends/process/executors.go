package process

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

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
			fo, err := simFanOut(cfg)
			if err != nil {
				return nil, err
			}
			width := make(map[string]int, len(o.SimOutputBytes))
			for model, b := range o.SimOutputBytes {
				if b < 1 {
					return nil, fmt.Errorf("--sim-output-bytes: %s=%d; want a byte count ≥ 1", model, b)
				}
				width[model] = (b + 3) / 4
			}
			return sim.New(o.Hardware, cfg.Profiles, sim.Options{Jitter: o.Jitter, Seed: o.Seed, FanOut: fo, OutputWidth: width})
		}),
	)) // four constant, distinct names (TestBuiltinExecutors)
}

// simFanOut derives the sim executor's fan-out models (sim.Options.FanOut)
// from cfg: for every session module with a FanOut (items per item of its
// one parent), the model of that parent (its Model, or each of its Variants'
// Model) emits that distribution of rows per input item. It errors naming
// the module when its distribution is not one or it has not exactly one
// parent in its session, and naming both session/module pairs when two give
// one model different distributions (sim emulates one per model). A config
// without fan-out modules gives an empty map.
func simFanOut(cfg *api.Config) (map[string]api.FanOut, error) {
	out := map[string]api.FanOut{}
	from := map[string]string{} // model -> "session/module" whose distribution it emits
	for _, s := range cfg.Sessions {
		for _, m := range s.Modules {
			if len(m.FanOut) == 0 {
				continue
			}
			at := s.Name + "/" + m.Name
			f, ok := m.FanOut.Normalized()
			if !ok {
				return nil, fmt.Errorf("sim executor: module %s: fanout %v is not a distribution of items per parent item; want items from 0 to %d listed once, weights finite and ≥ 0, and some weight > 0", at, m.FanOut, api.MaxFanOutItems)
			}
			if len(m.After) != 1 {
				return nil, fmt.Errorf("sim executor: module %s has a fanout but %d modules in after; want exactly one parent, whose model emits the rows", at, len(m.After))
			}
			i := slices.IndexFunc(s.Modules, func(p api.Module) bool { return p.Name == m.After[0] })
			if i < 0 {
				return nil, fmt.Errorf("sim executor: module %s fans out from %q, which is not a module of session %s", at, m.After[0], s.Name)
			}
			for _, v := range s.Modules[i].Choices() {
				if prev, ok := out[v.Model]; ok && !sameFanOut(prev, f) {
					return nil, fmt.Errorf("sim executor: model %q would emit two fan-out distributions, %s for module %s and %s for module %s; the sim executor emulates one per model: give the modules the same fanout or their parents different models",
						v.Model, fanOutString(prev), from[v.Model], fanOutString(f), at)
				}
				if _, ok := out[v.Model]; !ok {
					out[v.Model], from[v.Model] = f, at
				}
			}
		}
	}
	return out, nil
}

// sameFanOut reports whether two normalised distributions list the same items
// with shares within 1e-9 (normalising equal weights may round differently).
func sameFanOut(a, b api.FanOut) bool {
	return slices.EqualFunc(a, b, func(x, y api.FanOutShare) bool {
		return x.Items == y.Items && math.Abs(x.Share-y.Share) <= 1e-9
	})
}

// fanOutString writes f as the config does: {items: share, ...}.
func fanOutString(f api.FanOut) string {
	parts := make([]string, len(f))
	for i, s := range f {
		parts[i] = fmt.Sprintf("%d: %.4g", s.Items, s.Share)
	}
	return "{" + strings.Join(parts, ", ") + "}"
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
