package gateway

import (
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// InferRequest is a decoded KServe v2 infer request. Inputs own their Data (fresh
// slices per request), so they may be handed to the DAGRunner and outlive the
// request's buffers.
type InferRequest struct {
	ID      string
	Inputs  []api.Tensor
	Outputs []string // names of the requested outputs; empty: every output
	// Timeout, when positive and shorter than the session's SLO, is the
	// request's own deadline from its arrival: Triton's `timeout` parameter
	// (µs), an HTTP header, or the gRPC deadline (docs/protocol.md).
	Timeout time.Duration
	// Priority is Triton's `priority` parameter: 0 the default, 1 the
	// highest (PriorityClass).
	Priority int64
}

// Param is one numeric response parameter, e.g. "piccolo.e2e_ms": 12.5.
type Param struct {
	Key   string
	Value float64
}

// InferResponse is what the gateway answers: the session's name as model_name, the
// request's id, per-module timings as parameters, and the sink modules' outputs.
type InferResponse struct {
	ModelName  string
	ID         string
	Parameters []Param
	Outputs    []api.Tensor
	// Queue and Compute are the request's time queued and computing, summed
	// over the modules that ran (the same figures as the per-module
	// parameters): what the statistics extension counts.
	Queue, Compute time.Duration
}
