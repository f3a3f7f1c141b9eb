package backends

import (
	"context"

	"github.com/piccolo-serving/piccolo/api"
)

// Executor runs models on one kind of hardware: backends/sim sleeps the
// profiled durations, backends/onnx runs ONNX Runtime, backends/builtin runs
// Go code, and a Union offers the models of several.
// The Server calls Load and Models from its load/unload path (serialized: one call
// at a time); what Load returns is then used from many goroutines at once.
type Executor interface {
	// Models lists the models this executor can load, sorted by name.
	Models() []string
	// Load prepares model to run batches of up to batch items on concurrency
	// lanes (instances sharing the device). Zero batch or concurrency asks for the
	// executor's default (the sim: its largest profiled entry). Errors wrap
	// ErrUnknownModel, or ErrInvalidInput naming the value that is not allowed.
	Load(model string, batch, concurrency int) (Model, error)
}

// Model is one loaded model. Run is called concurrently by any number of
// goroutines. The Server calls Close once, after the model is unloaded or
// replaced and the last Run on it has returned (it counts the batches using
// each model: make-before-break), so a Model need not guard Run against
// Close; a Model used outside a Server (a fused chain's step is used by its
// chain only) has the same guarantee from its owner.
type Model interface {
	// Info describes the model; it is immutable.
	Info() ModelInfo
	// Run runs one batch of n ≥ 1 items. Every input has dimension 0 equal to n
	// and has passed validation against Info (datatype, sizes, batch ≤ MaxBatch).
	// Outputs have dimension 0 equal to n, and row i of every output belongs to
	// row i of the inputs (a FanOut model: n is 1 and the outputs have any
	// number of rows, equal across outputs). Run returns ctx's error if ctx ends first. Input Data
	// may alias the request buffer: Run must not keep it after returning.
	Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error)
	// Close releases the model's resources.
	Close() error
}

// ModelInfo describes a loaded model: what ModelMetadata reports and what the
// server validates requests against.
type ModelInfo struct {
	Name     string
	Platform string // e.g. "piccolo_sim"
	// MaxBatch is the largest batch (items, dimension 0) one ModelInfer may carry.
	MaxBatch int
	// Concurrency is the number of lanes: batches that run at once.
	Concurrency int
	// Inputs and Outputs have -1 for a variable dimension; dimension 0 is the batch.
	Inputs  []TensorSpec
	Outputs []TensorSpec
	// AnyInputs lets a request carry inputs not named in Inputs (any datatype and
	// shape, still checked for consistency). Named inputs are always checked.
	AnyInputs bool
	// FanOut marks a model whose outputs have any number of rows (k ≥ 0, equal
	// across its outputs) for its one input item: e.g. a text detector's boxes,
	// one row per box found. A fan-out model runs one item a call (MaxBatch 1;
	// the Server refuses to load it otherwise), and the Server marks its
	// responses with the parameter ParamFanOut so the Client gives the one item
	// all rows.
	FanOut bool
}

// TensorSpec is the name, datatype and shape of a model input or output.
type TensorSpec struct {
	Name     string
	Datatype string
	Shape    []int64 // -1: any size
}
