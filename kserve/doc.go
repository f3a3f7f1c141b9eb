// Package kserve is the gateway's edge: the KServe v2 (Open Inference Protocol)
// HTTP and gRPC servers over a gateway.DAGRunner, the JSON codec, the model
// metadata and health endpoints, and the one place where errors become HTTP
// statuses and gRPC codes.
//
// # Request path
//
// A request arrives on the HTTP server (fasthttp; one goroutine per
// connection) or the gRPC server (one goroutine per call). It is decoded
// (DecodeInferRequest for JSON, with this package's own scanner;
// DecodeBinaryInferRequest when the request has the
// Inference-Header-Content-Length header of the binary tensor data extension;
// raw_input_contents or typed contents for gRPC) into a gateway.InferRequest
// whose tensors own fresh data, and handed to DAGRunner.Infer on that
// goroutine, which blocks until the response is ready; AppendInferResponse
// writes the JSON answer into a pooled buffer (with the outputs the request
// asks in binary, "binary_data_output" or an output's "binary_data", after the
// JSON header, whose length the response's Inference-Header-Content-Length
// gives). Routes:
//
//	HTTP: GET /v2, /v2/health/live, /v2/health/ready,
//	      /v2/models/{session}[/versions/1], .../ready, .../stats, /v2/models/stats;
//	      POST /v2/models/{session}[/versions/1]/infer, /v2/repository/index;
//	      GET /metrics (ServerOptions.Metrics); /admin/ (ServerOptions.Admin),
//	      unless ServerOptions.AdminApart: then those two and
//	      /debug/pprof/NAME are on the admin listener only
//	      (NewAdminHTTPServer, HandleAdminHTTP) and 404 here
//	gRPC: inference.GRPCInferenceService (with ModelStatistics and
//	      RepositoryIndex), grpc.health.v1.Health, server reflection
//
// Hostile clients (docs/security.md): a panic while serving is answered 500
// / INTERNAL with the request's id (api.Recovered); the request bytes in
// flight are bounded by a budget taken from as they arrive (budget.go:
// bodies, decompressed bodies, decoded tensors, which grow as elements are
// read and are never allocated from a declared shape); inputs, outputs,
// parameters and names are capped (limits.go) and duplicate names refused
// in linear time; HTTP connections have a header timeout apart from the
// body's and a cap per client address (conns.go); gRPC connections a cap
// on streams, keepalive enforcement and a maximum age.
//
// A session has one version, SessionVersion ("1"); any other is 404 /
// NOT_FOUND. A request body may be compressed (Content-Encoding gzip, deflate,
// br, zstd; requestBody in encoding.go), and MaxBodyBytes holds after
// decompression; responses are compressed as Accept-Encoding asks.
//
// The JSON decoder is strict (docs/protocol.md, "Strict input"): a duplicate
// key, data nested otherwise than flat or exactly as the shape, and a number
// that does not fit its datatype are ErrBadInput naming what and where;
// null is an absent field. Numbers are converted from what the scanner
// accumulated in its one pass (num in jsonscan.go, number.go), rounded once
// to the element type.
//
// The door (overload.go, ServerOptions.Overload; docs/traffic.md, "Overload
// control"): with it on, an infer request beyond an adaptive limit on those
// in flight is refused before its body is decoded — HTTP 429 with
// Retry-After at the top of HandleHTTP, gRPC RESOURCE_EXHAUSTED with a
// RetryInfo detail from the server's InTapHandle, before the message is
// read. The limit shrinks while the gateway's goroutines wait for a CPU
// longer than the target and grows back when they do not; a request costs
// the door one atomic add in and one out.
//
// Statistics (stats.go): each session's successes, failures, queue and
// compute time are atomic counters in a copy-on-write table, added to by the
// handlers after each request without a lock.
//
// Why a hand-written JSON scanner: a request body is mostly one long array of
// numbers, decoded straight into little-endian tensor bytes; a generic decoder
// would cost a reflective walk, an interface box per element and a copy
// (jsonscan.go). Why our own binary extension: it is a few length checks over
// the same scanner, and no Go library implements it. The fuzz tests
// (FuzzDecodeInferRequest, FuzzDecodeBinaryInferRequest, FuzzGRPCInputs;
// corpora in testdata/fuzz) check that any input is either refused with
// ErrBadInput or decoded into valid tensors that encode back.
//
// Triton's schedule policy parameters "timeout" (µs) and "priority" (JSON
// request parameters, gRPC int64/uint64 parameters) and the HeaderTimeout
// header fill InferRequest.Timeout and Priority; the gRPC deadline reaches
// DAGRunner.Infer through the call's context. An HTTP request runs on its
// connection's context, which WatchHangups cancels when the client hangs up
// (hangup.go); a gRPC request on its call's, which grpc-go cancels. Either
// way DAGRunner.Infer then abandons the request's queued items.
//
// # Errors
//
// Every error the gateway returns wraps one of package gateway's sentinels.
// HTTPStatus and GRPCCode map them once, here: ErrBadInput 400
// INVALID_ARGUMENT, ErrUnknownSession 404 NOT_FOUND, ErrTooLarge 413 and
// ErrOverloaded 429 RESOURCE_EXHAUSTED, ErrDeadline 504 DEADLINE_EXCEEDED,
// ErrUnavailable 503 UNAVAILABLE, a cancelled client 499 CANCELLED, anything
// else 502 UNAVAILABLE. An HTTP error body is {"error": "<message>"}.
//
// What a client reads of an error is publicMessage's: the message of an
// error made for it (gateway.BadInput, gateway.Public: about its request and
// the session's public metadata), else a fixed message for the class that
// names the session; then " (request id <id>)", the request's "id" or one
// made here. The error's chain, which may name backends' addresses and
// carry their errors, is logged under that id (ServerOptions.Logger), never
// answered.
//
// # Who calls what
//
// The wiring (cmd/piccolo) builds a Server with NewServer and serves
// NewHTTPServer (on WatchHangups' listener, under TLS when asked) and
// NewGRPCServer once the plan is live; SetReady(false) on
// shutdown. Readiness is one fact (SetReady): HTTP /v2/health/ready (200 or
// 503), ServerReady and ModelReady, and the gRPC health service's status for
// "" and HealthService (SERVING or NOT_SERVING, grpc-go's health server). The server
// counts every answered request in ServerOptions.Metrics (atomic adds on
// children resolved up front). It imports gateway and metrics; the admin API
// (package controlplane) is plugged in as a fasthttp.RequestHandler so this
// package never imports the control plane.
package kserve
