package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
)

var _ transport = (*grpcTransport)(nil)

// grpcTransport speaks KServe v2 over gRPC (inference.GRPCInferenceService).
type grpcTransport struct {
	conn    *grpc.ClientConn
	client  inference.GRPCInferenceServiceClient
	session string
	timeout time.Duration
	// requests holds, per payload, the request template: inputs and raw contents
	// are shared (read-only) by every request built from it.
	requests map[*Payload]*inference.ModelInferRequest
}

// maxGRPCMessage bounds replies (outputs can be large images or feature maps).
const maxGRPCMessage = 256 << 20

// newGRPCTransport dials target ("host:port", optionally "grpc://host:port").
// Dialing is lazy: a server that is down shows as "unavailable" per request.
func newGRPCTransport(target, session string, timeout time.Duration) (*grpcTransport, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if addr == "" || strings.Contains(addr, "://") {
		return nil, fmt.Errorf("target %q: for --protocol grpc give host:port (optionally grpc://host:port)", target)
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxGRPCMessage), grpc.MaxCallSendMsgSize(maxGRPCMessage)))
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	return &grpcTransport{conn: conn, client: inference.NewGRPCInferenceServiceClient(conn), session: session, timeout: timeout}, nil
}

// prepare builds the request templates; it is called once, before any infer.
func (g *grpcTransport) prepare(payloads []Payload) {
	g.requests = make(map[*Payload]*inference.ModelInferRequest, len(payloads))
	for i := range payloads {
		p := &payloads[i]
		r := &inference.ModelInferRequest{ModelName: g.session}
		for _, t := range p.Tensors {
			r.Inputs = append(r.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
			r.RawInputContents = append(r.RawInputContents, t.Data)
		}
		g.requests[p] = r
	}
}

func (g *grpcTransport) infer(ctx context.Context, id uint64, p *Payload) kind {
	tmpl := g.requests[p]
	req := &inference.ModelInferRequest{
		ModelName:        tmpl.ModelName,
		Id:               strconv.FormatUint(id, 10),
		Inputs:           tmpl.Inputs,
		RawInputContents: tmpl.RawInputContents,
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	deadline, _ := ctx.Deadline()
	_, err := g.client.ModelInfer(ctx, req)
	ctxErr := ctx.Err()
	cancel()
	if err == nil {
		return kindOK
	}
	// gRPC sends our deadline to the server (grpc-timeout), which may report it
	// expired a moment before our own timer fires: within 5 % of the timeout of
	// our deadline, DEADLINE_EXCEEDED is our timeout, not the server's verdict.
	ours := errors.Is(ctxErr, context.DeadlineExceeded) ||
		(status.Code(err) == codes.DeadlineExceeded && !time.Now().Before(deadline.Add(-g.timeout/20)))
	return grpcKind(err, ctxErr, ours)
}

// grpcKind maps a ModelInfer error to an outcome. ctxErr is the call context's
// error; timedOut says the call ran into our own --timeout.
func grpcKind(err, ctxErr error, timedOut bool) kind {
	switch {
	case timedOut:
		return kindTimeout
	case errors.Is(ctxErr, context.Canceled):
		return kindCanceled
	}
	st, ok := status.FromError(err)
	if !ok {
		return kindTransport
	}
	switch st.Code() {
	case codes.OK:
		return kindOK
	case codes.ResourceExhausted:
		return kindOverloaded
	case codes.DeadlineExceeded:
		return kindDeadline
	case codes.Unavailable:
		return kindUnavailable
	case codes.NotFound:
		return kindNotFound
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		return kindBadRequest
	case codes.Unauthenticated, codes.PermissionDenied:
		return kindUnauthorized
	case codes.Canceled:
		return kindCanceled
	}
	return kindServerError // Internal, Unknown, Unimplemented, DataLoss, Aborted
}

// metadata reads ModelMetadata: the declared inputs. The gRPC message has no
// parameters, so the SLO is never known from it.
func (g *grpcTransport) metadata(ctx context.Context) (modelMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, max(g.timeout, metadataTimeout))
	defer cancel()
	resp, err := g.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: g.session})
	if err != nil {
		return modelMetadata{}, fmt.Errorf("ModelMetadata %q: %w", g.session, err)
	}
	var md modelMetadata
	for _, in := range resp.GetInputs() {
		md.inputs = append(md.inputs, TensorSpec{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape()})
	}
	return md, nil
}

func (g *grpcTransport) close() { g.conn.Close() }
