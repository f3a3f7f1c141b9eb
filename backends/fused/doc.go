// Package fused is an executor of fused chains (operator fusion, as in
// Cloudflow §4): a chain of models that would be adjacent modules of a session,
// each the only child of the one before, served as one model by one backend
// call, so the tensors that pass between them never leave the process.
//
// # Names
//
// A fused model is named by its steps' model names joined with "+", in the
// order they run: "ocr-pre+ocr-det" runs ocr-pre, then ocr-det on its
// outputs. The planner (planner.Fuse) uses the same rule, and names the
// fused module by its modules' names joined with "+" ("pre+det").
//
// # Contract
//
// New wraps an inner executor (e.g. the Union of builtin and onnx that
// `piccolo backend --executor ocr` serves) and offers every inner model plus the
// fused chains it is given; Load also accepts any other "+"-joined chain of at
// least two inner models. Load loads every step on the inner executor with the
// same batch and concurrency; the fused model's Info takes as inputs the first
// step's and those of later steps that no step before produces (what an ONNX
// step passes through), its outputs and FanOut from the last step, MaxBatch and Concurrency as
// the smallest of the steps'. Only the last step may fan out (a fan-out step
// changes the number of rows, which the next step's batch would not expect): a
// chain with a fan-out step elsewhere is ErrInvalidInput.
//
// Run calls the steps' Run in sequence, each step's outputs as the next one's
// inputs, exactly what the gateway would send a module with one parent
// (gateway/doc.go): no copy, no serialization, no hop. The first step's inputs
// have passed the Server's validation; the later steps' come from the step
// before, whose outputs match its Info. ctx is checked between steps.
//
// # Concurrency
//
// An Executor is immutable after New; Load is called by one goroutine at a time
// (the Server's load path). A fused Model's Run is safe for concurrent use as
// its steps' are; Close closes every step once.
package fused
