// Package onnx is the `onnx` executor of `piccolo backend`: it runs ONNX models
// on the CPU with ONNX Runtime, through github.com/yalue/onnxruntime_go.
//
// # What it reads
//
// The ONNX Runtime shared library (Options.Library: libonnxruntime.so.1 from the
// npm package onnxruntime-node 1.30.0, fetched by `make models` into the cache)
// is opened at run time, once per process (cgo, no #cgo flags). Models are the
// files <Options.ModelDir>/<model>.onnx: the model name is the file name without
// ".onnx" (`make models` stores PaddleOCR v4 as ocr-det, ocr-cls and ocr-rec).
//
// # Loading and running
//
// Load(model, batch, concurrency) opens `concurrency` ONNX Runtime sessions of the
// model (lanes), each with Options.IntraOpThreads intra-op threads, so one
// machine can host hardware types of different sizes (cpu-1t: 1 thread, cpu-2t:
// 2 threads). A batch of n items arrives stacked on dimension 0 and runs as one
// ONNX Runtime call on one free lane; batches beyond the lanes wait in FIFO order.
// When ctx ends during a call, the call is terminated (RunOptions.Terminate) and
// Run returns ctx's error.
//
// Shapes. ONNX Runtime runs one shape per call, so every item of a batch has the
// same shape: variable-sized images are padded to one shape by the processing
// module before them (backends/builtin pads det input to a square canvas and text
// crops to a fixed width), not bucketed. Padding keeps every batch of a module
// batchable with every other and its duration a function of the batch size only,
// which is what the planner's profiles assume; bucketing would split a module's
// stream into per-shape streams with smaller batches. Options.Shapes fixes the
// item shape of a model's input: Info then reports it (so the server rejects
// other shapes with INVALID_ARGUMENT) and Load warms every lane up at that shape
// (the first call at a new shape is several times slower than later ones).
//
// Variants. Options.Resized serves a model under another name as the same .onnx
// file at a smaller input (docs/variants.md): Run resizes each item of the
// model's only input (FP32 C×H×W, bilinear) from the served shape to the
// file's, and optionally the first output back, so the modules around it see
// the full-size model's shapes.
//
// Pass-through. With Options.PassThrough, Run returns, after the model's outputs,
// a copy of every input the model does not consume, so a chain of modules can
// carry a tensor past a model (the OCR crop travels past the direction
// classifier to the rotation step). Info.AnyInputs is true: inputs not named by
// the model are accepted and, without PassThrough, ignored.
//
// # Concurrency
//
// An Executor is immutable after New. Load is called by one goroutine at a time
// (the server's load path). A loaded model's Run is safe for concurrent use; its
// per-lane buffers are reused, so a Run allocates only its outputs. Close waits
// for the calls in flight to finish, then releases the sessions; Runs still
// waiting for a lane get ErrClosed (a backends.Server closes a model only
// after its last batch returns, so none wait then). With Options.DeviceLanes,
// the executor's models share that many device lanes: a Run holds its
// model's lane and one device lane while ONNX Runtime runs, and waits for
// both in FIFO order (or until its context ends).
package onnx
