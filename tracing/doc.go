// Package tracing is Piccolo's OpenTelemetry tracing: the tracer provider
// (OTLP over gRPC, off by default), W3C trace context in and out of the
// gateway's HTTP and gRPC servers, and the span names and attributes the
// request path records (docs/observability.md, "Tracing").
//
// # Spans
//
// One request through a session makes this tree (every span of one trace):
//
//	infer {session}                 kserve: the HTTP or gRPC request (server kind)
//	└─ module {module}             dataplane: the request's item in one module
//	   ├─ queue                     from the item's arrival to its batch's send
//	   └─ compute                   from the send to the batch's answer
//
// and each batch a module sends is a trace of its own, linked to the module
// spans of every request it carries (a batch serves several traces, so it
// cannot be a child of one):
//
//	batch {module}                  dataplane: one batch on one machine
//	└─ inference.GRPCInferenceService/ModelInfer   the backend call (client kind),
//	                                 whose traceparent the backend receives
//
// # Contract
//
// Setup is called once by the command's wiring before the servers start;
// Shutdown flushes and stops at exit. Enabled is one atomic load: the request
// path asks it before doing any tracing work, so with tracing off (the
// default) a request pays that load and nothing else. All functions are safe
// for concurrent use.
package tracing
