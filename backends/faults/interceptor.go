package faults

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// ServerOption returns the gRPC server option that applies reset and
// malformed to ModelInfer (a chained unary interceptor, so it composes with
// others). Pass it to backends.NewGRPCServer.
func (j *Injector) ServerOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(j.intercept)
}

// intercept applies reset and malformed; with no fault, one atomic load.
func (j *Injector) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a := j.cur.Load()
	if a == nil || !(a.set.Reset || a.set.Malformed) || info.FullMethod != inference.GRPCInferenceService_ModelInfer_FullMethodName {
		return handler(ctx, req)
	}
	if a.set.Reset {
		j.cutCall(ctx)
		return nil, status.Errorf(codes.Unavailable, "%v: reset", ErrInjected)
	}
	resp, err := handler(ctx, req)
	if r, ok := resp.(*inference.ModelInferResponse); ok && err == nil {
		malform(r, j.malformed.Add(1))
	}
	return resp, err
}

// cutCall resets the connection the call in ctx came on, if the Listener has it.
func (j *Injector) cutCall(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	j.mu.Lock()
	l := j.lis
	j.mu.Unlock()
	if ok && p.Addr != nil && l != nil {
		l.cut(p.Addr.String())
	}
}

// malform breaks the first output of r: on odd calls it loses its last row
// (dimension 0 one short, data cut to match, so only the row count is wrong);
// on even calls its data is one byte short of its shape. The shape slice is
// copied and the data resliced: nothing shared is written.
func malform(r *inference.ModelInferResponse, call uint64) {
	if len(r.Outputs) == 0 || len(r.RawOutputContents) == 0 {
		return
	}
	o, raw := r.Outputs[0], r.RawOutputContents[0]
	cut := len(raw) - 1
	if call%2 == 1 && len(o.Shape) > 0 && o.Shape[0] > 0 {
		t := api.Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Data: raw}
		if offsets, err := t.RowOffsets(nil); err == nil {
			shape := append([]int64(nil), o.Shape...)
			shape[0]--
			o.Shape = shape
			cut = offsets[len(offsets)-2]
		}
	}
	if cut >= 0 {
		r.RawOutputContents[0] = raw[:cut:cut]
	}
}
