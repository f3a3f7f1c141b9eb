package kserve

import (
	"errors"
	"testing"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"google.golang.org/protobuf/proto"
)

// FuzzGRPCInputs feeds arbitrary wire bytes as a ModelInferRequest to the input
// conversion: it must never panic, must refuse with ErrBadInput, and whatever it
// accepts must be valid tensors.
func FuzzGRPCInputs(f *testing.F) {
	seeds := []*inference.ModelInferRequest{
		{ModelName: "s", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}}},
			RawInputContents: [][]byte{gatewaytest.FP32(1, 2)}},
		{ModelName: "s", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "INT8", Shape: []int64{2},
			Contents: &inference.InferTensorContents{IntContents: []int32{-1, 300}}}}},
		{ModelName: "s", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "b", Datatype: "BYTES", Shape: []int64{1},
			Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte("hi")}}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req inference.ModelInferRequest
		if proto.Unmarshal(wire, &req) != nil {
			return // grpc-go refuses these before the handler
		}
		ts, err := grpcInputs(&req, nil)
		if err != nil {
			if !errors.Is(err, gateway.ErrBadInput) {
				t.Fatalf("error %v does not match ErrBadInput", err)
			}
			return
		}
		for _, in := range ts {
			if err := in.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor: %v", err)
			}
		}
	})
}
