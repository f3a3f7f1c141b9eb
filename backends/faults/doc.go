// Package faults makes a `piccolo backend` misbehave on purpose, so that tests
// and operators can rehearse the failures a gateway must survive: a backend
// that refuses connections, cuts calls, hangs, runs slow, fails a share of its
// calls or answers malformed outputs (docs/faults.md).
//
// One Injector holds the active faults of one backend as an immutable Set
// behind an atomic pointer (nil: no fault). It reaches the backend through
// three wrappers, each installed once at start:
//
//   - Executor wraps the backends.Executor: its models hang (hang), fail a
//     share of batches with an INTERNAL error (fail) or run k times as long
//     (slow: the sim's profiled duration ×k, any other executor's measured run
//     time ×k, holding one of the model's lanes all along);
//   - Listener wraps the gRPC listener: refuse closes the listening socket and
//     every accepted connection, and reopens the socket on the same address
//     when refuse is cleared; reset cuts a call's connection (TCP RST);
//   - ServerOption adds a unary interceptor to the gRPC server: reset (through
//     the Listener) and malformed (the response's first output loses a row from
//     its shape, or a byte from its data, past the Server's own checks).
//
// Hang, fail, slow, reset and malformed touch ModelInfer only; refuse touches
// every call on the port. With no fault active, a batch pays one atomic load in
// the model wrapper and one in the interceptor (BenchmarkRunNoFault,
// BenchmarkInterceptNoFault).
//
// Set replaces the active faults (validated whole: a bad Set changes nothing),
// Clear removes them, Get reads them; each change is logged once and shown by
// the gauge piccolo_backend_fault{kind}. Handler serves the same as
// GET/PUT/DELETE with JSON (the backend's /admin/faults). Parse reads the
// --fault flag's words.
//
// Concurrency: every method is safe for concurrent use. Set, Clear and the
// handler's PUT/DELETE are serialized; wrapped models read the Set without a
// lock. A batch hanging when hang is cleared goes on and runs.
package faults
