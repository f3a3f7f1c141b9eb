// Package inference is the generated Go code of the KServe v2 / Open Inference
// Protocol gRPC service (proto package `inference`, service GRPCInferenceService)
// with Triton's model-repository extension. Its messages are wire-compatible with
// Triton Inference Server and KServe, so the gateway's backend client talks to a
// `piccolo backend` and to a real Triton alike.
//
// Only grpc_service.proto and this file are written by hand; regenerate the rest
// with `make proto` (scripts/gen-proto.sh). Tensors travel as raw little-endian
// bytes in ModelInferRequest.raw_input_contents and
// ModelInferResponse.raw_output_contents, one entry per tensor, in the order of
// the tensors; see api.Tensor for the Go side.
package inference
