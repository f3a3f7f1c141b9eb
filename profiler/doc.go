// Package profiler measures the profile of one model on one hardware type
// against any KServe v2 gRPC server: a `piccolo backend` (any executor) or a
// Triton Inference Server in explicit model-control mode. What it writes is the
// `profiles:` YAML the planner reads (api.Load), entries {batch, concurrency,
// duration} sorted by concurrency then batch (paper §III-A, Table I).
//
// # What Run does
//
// For each concurrency c of Options.Concurrencies (ascending) Run loads the model
// with RepositoryModelLoad parameters batch = the largest of Options.Batches and
// concurrency = c (Options.NoLoad skips this and profiles the server's current
// configuration). It asks ModelMetadata once for the declared inputs. For each
// batch b (ascending) it builds one request of b rows, prepared once and reused:
// the declared inputs as zeros with every -1 dimension set to 1 and dimension 0
// set to b, or, with Options.Inputs (KServe v2 JSON request bodies or image files
// read by loadgen.LoadInputs), their rows repeated in order until there are b.
// It then runs c workers in a closed loop, so exactly c batches are in flight:
//
//   - warm-up: each worker makes Options.Warmup calls, or stops early (after at
//     least one) once Options.WarmupTime has passed; these calls are not recorded;
//   - measurement: each worker calls again and again until Options.Duration has
//     passed since the measurement began, recording the latency of every call.
//
// The point's duration d, the one the profile entry gets, is the
// Options.Percentile-th percentile (nearest rank, default 90) of those
// latencies; see DefaultPercentile for why p90. The point also records p50, p99,
// max, the calls made, each call's latency, the profile throughput c·b/d and
// the measured items/s (calls × b over the measurement's wall time).
//
// When Run loaded a model that was not loaded before, it unloads it at the end;
// a model that was already loaded is left loaded with the last concurrency.
//
// # Errors
//
// An unreachable target wraps backends.ErrBackendUnavailable; a model the target
// does not know wraps backends.ErrUnknownModel; a point that fails (the server
// refuses the load or the batch, e.g. a batch above its max) is a *PointError
// naming the batch and concurrency. Invalid Options wrap ErrBadOptions and name
// the field. On a failure after some points were measured, Run returns the
// partial Result with the error.
//
// # Accuracy
//
// MeasureAccuracy sends every image of a labelled set (a directory of images
// and LabelsFile) to a model that reads images and answers text (a gateway
// session) and returns the exact-match word accuracy; SetAccuracy writes it
// into a config file's profiles of a model, where a variant without an
// accuracy finds it (docs/variants.md).
//
// # Goroutines
//
// Run is called from one goroutine; it starts c workers per point and returns only
// after they stopped. Result and the functions that write it (Profile, WriteYAML,
// WriteTable) are plain values and pure functions, safe to use from anywhere once
// Run returned.
package profiler
