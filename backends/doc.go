// Package backends is both ends of the gateway → backend hop: the backend worker
// server (`piccolo backend`) and the gateway-side client. Both speak the KServe v2
// gRPC protocol of api/inference, which Triton also serves; our tests run the two
// ends against each other only.
//
// Server side. A Server serves GRPCInferenceService over one Executor:
// backends/sim (profiled durations), backends/onnx (ONNX Runtime on the CPU),
// backends/builtin (processing modules in Go), or a Union of several (`piccolo
// backend --executor ocr` is builtin and onnx in one process). Models start
// unloaded: ModelReady is false and ModelInfer answers FAILED_PRECONDITION until
// RepositoryModelLoad loads the model with parameters "batch" (max batch, items)
// and "concurrency" (lanes), each an int64_param or a decimal string_param.
// ModelInfer checks every input (datatype, shape, raw size, dimension 0 equal
// across inputs, batch ≤ the loaded max batch) and answers INVALID_ARGUMENT naming
// the tensor; it reads the loaded-model table from an immutable snapshot (no lock)
// and logs nothing per request. An executor panic becomes INTERNAL. With
// ServerOptions.Metrics it counts batches, items and errors per model
// (piccolo_backend_*), through counters resolved at load.
//
// Make-before-break. Each loaded model is reference-counted: the table holds
// one reference, each ModelInfer one for its batch (two atomic operations a
// batch). RepositoryModelUnload and a reload with new settings take the model
// out of the table at once (later calls get the new model, or
// FAILED_PRECONDITION), and the model is closed when its last batch returns,
// so a batch in flight, or one waiting for a lane, or a fused chain between
// steps, never meets a closed model. A reload loads and warms the new model
// before it is listed; a load asking for the settings already loaded keeps
// the model as it is (no new sessions, no warm-up).
//
// Health and reflection. NewGRPCServer also registers the gRPC health service
// (grpc.health.v1, services "" and HealthService) and server reflection, so
// Kubernetes' gRPC probe and grpcurl need nothing else. Health answers
// NOT_SERVING until Server.Serve (called once the preloaded models are loaded
// and the listener accepts), SERVING from then, and NOT_SERVING for good from
// Drain. A Health/Watch stream left open holds GracefulStop until the caller's
// drain timeout: probes use Check.
//
// Fan-out. A model whose Info has FanOut (e.g. builtin's ocr-boxes: one row
// per text box found) answers one item with any number of output rows k ≥ 0,
// equal across its outputs. The Server loads it with max batch 1 only, checks
// that its outputs agree on dimension 0 instead of equalling the batch, and
// marks the response with the parameter ParamFanOut (bool true); the Client,
// seeing the mark on a one-item call, gives that item all k rows. Without the
// mark (any other model, or a Triton server) the rows must equal the items'.
// The gateway needs nothing more: it runs a fan-out model's module one item a
// batch (the plan's batch 1) and fans the k rows out to the children whose
// rate is higher (gateway/doc.go).
//
// Client side. A Client holds one pooled *grpc.ClientConn per backend address
// (Pool), with keepalive and 256 MiB message limits. Client.Infer takes a batch as
// items, each item's inputs with dimension 0 = its rows (1 for one request),
// stacks every input on dimension 0 into one ModelInfer with raw_input_contents,
// checks the response and splits every output back per item. Errors wrap the
// sentinels of errors.go (ErrBackendUnavailable, ErrBackendBadResponse, ...) or
// ctx's error; deadlines come from ctx. NotExecuted(err) tells a call that never
// reached the backend (safe to retry anywhere), IsTransport(err) one that failed
// for want of a working backend rather than on its answer.
//
// Concurrency: Server and Client methods are safe for concurrent use from any
// goroutine. Executor.Load is called by one goroutine at a time; Model.Run by many.
// Tensors passed in are read, not kept; tensors returned belong to the caller and
// may alias one response buffer.
package backends
