package inference

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestWireCompatibleWithTriton pins the names and numbers Triton and KServe
// clients put on the wire: changing any of them breaks interoperability.
func TestWireCompatibleWithTriton(t *testing.T) {
	for _, tc := range []struct {
		msg    proto.Message
		fields map[string]protoreflect.FieldNumber
	}{
		{&ModelInferRequest{}, map[string]protoreflect.FieldNumber{"model_name": 1, "model_version": 2, "id": 3, "parameters": 4, "inputs": 5, "outputs": 6, "raw_input_contents": 7}},
		{&ModelInferRequest_InferInputTensor{}, map[string]protoreflect.FieldNumber{"name": 1, "datatype": 2, "shape": 3, "parameters": 4, "contents": 5}},
		{&ModelInferRequest_InferRequestedOutputTensor{}, map[string]protoreflect.FieldNumber{"name": 1, "parameters": 2}},
		{&ModelInferResponse{}, map[string]protoreflect.FieldNumber{"model_name": 1, "model_version": 2, "id": 3, "parameters": 4, "outputs": 5, "raw_output_contents": 6}},
		{&ModelInferResponse_InferOutputTensor{}, map[string]protoreflect.FieldNumber{"name": 1, "datatype": 2, "shape": 3, "parameters": 4, "contents": 5}},
		{&InferParameter{}, map[string]protoreflect.FieldNumber{"bool_param": 1, "int64_param": 2, "string_param": 3, "double_param": 4, "uint64_param": 5}},
		{&InferTensorContents{}, map[string]protoreflect.FieldNumber{"bool_contents": 1, "int_contents": 2, "int64_contents": 3, "uint_contents": 4, "uint64_contents": 5, "fp32_contents": 6, "fp64_contents": 7, "bytes_contents": 8}},
		{&ModelRepositoryParameter{}, map[string]protoreflect.FieldNumber{"bool_param": 1, "int64_param": 2, "string_param": 3, "bytes_param": 4}},
		{&RepositoryModelLoadRequest{}, map[string]protoreflect.FieldNumber{"repository_name": 1, "model_name": 2, "parameters": 3}},
		{&RepositoryModelUnloadRequest{}, map[string]protoreflect.FieldNumber{"repository_name": 1, "model_name": 2, "parameters": 3}},
		{&ModelMetadataResponse{}, map[string]protoreflect.FieldNumber{"name": 1, "versions": 2, "platform": 3, "inputs": 4, "outputs": 5}},
		{&ModelMetadataResponse_TensorMetadata{}, map[string]protoreflect.FieldNumber{"name": 1, "datatype": 2, "shape": 3}},
		{&ModelReadyRequest{}, map[string]protoreflect.FieldNumber{"name": 1, "version": 2}},
		{&ServerMetadataResponse{}, map[string]protoreflect.FieldNumber{"name": 1, "version": 2, "extensions": 3}},
	} {
		md := tc.msg.ProtoReflect().Descriptor()
		if md.ParentFile().Package() != "inference" {
			t.Fatalf("proto package %q, want inference", md.ParentFile().Package())
		}
		if md.Fields().Len() != len(tc.fields) {
			t.Errorf("%s has %d fields, want %d", md.FullName(), md.Fields().Len(), len(tc.fields))
		}
		for name, num := range tc.fields {
			f := md.Fields().ByName(protoreflect.Name(name))
			if f == nil || f.Number() != num {
				t.Errorf("%s.%s: %v, want number %d", md.FullName(), name, f, num)
			}
		}
	}
	if GRPCInferenceService_ModelInfer_FullMethodName != "/inference.GRPCInferenceService/ModelInfer" ||
		GRPCInferenceService_RepositoryModelLoad_FullMethodName != "/inference.GRPCInferenceService/RepositoryModelLoad" {
		t.Error("service or method names differ from Triton's")
	}
}
