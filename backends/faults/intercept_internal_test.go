package faults

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// BenchmarkInterceptNoFault compares calling a gRPC handler directly with
// calling it through the fault interceptor with no fault active.
func BenchmarkInterceptNoFault(b *testing.B) {
	j, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	resp := &inference.ModelInferResponse{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: inference.GRPCInferenceService_ModelInfer_FullMethodName}
	req := &inference.ModelInferRequest{}
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, req)
		}
	})
	b.Run("intercepted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = j.intercept(ctx, req, info, handler)
		}
	})
}
