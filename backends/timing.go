package backends

import (
	"context"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// Response parameters (int64_param, nanoseconds) by which the Server reports
// how one batch's time at the backend split (Timing): the gateway learns its
// devices from Compute, not from its own round trip, which also counts the
// network and its own host (docs/calibration.md, "Device time").
const (
	ParamQueueNanos   = "piccolo_queue_ns"
	ParamComputeNanos = "piccolo_compute_ns"
)

// Timing is how one batch's time at a backend split: Queue, waiting there
// for a lane of its model or of the device; Compute, the model running on
// the device. A zero Compute means not reported (a backend that does not
// send the parameters, a Triton server): the caller falls back to its round
// trip. Plain values: carried per batch without allocation.
type Timing struct {
	Queue, Compute time.Duration
}

// Reported says whether the backend reported the batch's device time.
func (t Timing) Reported() bool { return t.Compute > 0 }

// TimedModel is a Model that reports how each batch's time split: RunTimed
// is Run plus its Timing. The Server calls RunTimed when a model has it
// (the sim reports its emulated device time, onnx its lane wait apart from
// its run, a fused chain its steps' sums); for another Model it reports the
// whole of Run as Compute.
type TimedModel interface {
	Model
	RunTimed(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, Timing, error)
}

// RunTimed runs one batch on m and returns its Timing: m's own when m is a
// TimedModel, else the wall time of Run as Compute (Queue 0).
func RunTimed(ctx context.Context, m Model, inputs []api.Tensor, n int) ([]api.Tensor, Timing, error) {
	if tm, ok := m.(TimedModel); ok {
		return tm.RunTimed(ctx, inputs, n)
	}
	start := time.Now()
	out, err := m.Run(ctx, inputs, n)
	return out, Timing{Compute: max(time.Since(start), 1)}, err
}

// timingParams returns the response parameters that carry t (and the
// fan-out mark when fanOut): one small map a batch.
func timingParams(t Timing, fanOut bool) map[string]*inference.InferParameter {
	p := make(map[string]*inference.InferParameter, 3)
	p[ParamQueueNanos] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(t.Queue)}}
	p[ParamComputeNanos] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(t.Compute)}}
	if fanOut {
		p[ParamFanOut] = fanOutParams[ParamFanOut]
	}
	return p
}

// responseTiming reads the Timing a response carries (zero: none, or a
// value that is not a positive duration).
func responseTiming(resp *inference.ModelInferResponse) Timing {
	ps := resp.GetParameters()
	if len(ps) == 0 {
		return Timing{}
	}
	c := ps[ParamComputeNanos].GetInt64Param()
	if c <= 0 {
		return Timing{}
	}
	return Timing{Queue: time.Duration(max(ps[ParamQueueNanos].GetInt64Param(), 0)), Compute: time.Duration(c)}
}
