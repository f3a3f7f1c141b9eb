// Package process is the `piccolo backend` process: Run builds the executor a
// name asks for (BuiltinExecutors: sim, onnx, builtin, ocr), wraps it in the fault
// injector (backends/faults), serves it with backends.Server over KServe v2
// gRPC, serves its Prometheus metrics (and the fault admin API) on a port of
// its own, registers with Consul when asked, and drains on shutdown.
//
// cmd/piccolo holds only the command's flags and passes them as Options; the
// errors name those flags (--listen, --executor, --hardware...), as the
// command has always answered. Run is called once per process, from the
// command's goroutine; it starts its own serving goroutines and returns when
// the context ends and the drain is over, or at the first error. Nothing here
// is on the request path: backends.Server is.
package process
