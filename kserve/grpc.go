package kserve

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/tenants"
	"github.com/piccolo-serving/piccolo/tracing"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // clients may send gzip messages; MaxRecvMsgSize holds after decompression
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// grpcService implements inference.GRPCInferenceService over a Server's DAGRunner.
// The model repository methods are not served by a gateway (Unimplemented).
type grpcService struct {
	inference.UnimplementedGRPCInferenceServiceServer
	s *Server
}

var _ inference.GRPCInferenceServiceServer = (*grpcService)(nil)

// GRPCService returns the KServe v2 gRPC service of s, to register on any
// grpc.Server.
func (s *Server) GRPCService() inference.GRPCInferenceServiceServer { return &grpcService{s: s} }

// NewGRPCServer returns a grpc.Server with the inference service, the gRPC
// health service (grpc.health.v1, following SetReady: what Kubernetes' gRPC
// probe asks) and server reflection (so that `grpcurl -plaintext ADDR list`
// needs no .proto) registered, and the message limit set to MaxBodyBytes (over
// it grpc-go answers RESOURCE_EXHAUSTED). A Health/Watch stream left open holds
// GracefulStop until its caller closes it or the drain times out. Its
// connections are bounded: DefaultMaxConcurrentStreams calls each,
// keepalive pings no closer than DefaultKeepaliveMinTime, and a GOAWAY
// after DefaultMaxConnectionAge (calls in flight get the grace to finish);
// extra options come after these and may override them. With the door on
// (ServerOptions.Overload) it sets the server's InTapHandle, so extra must not
// set another.
func (s *Server) NewGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.MaxBodyBytes),
		grpc.MaxSendMsgSize(max(s.opts.MaxBodyBytes, 256<<20)),
		grpc.MaxConcurrentStreams(DefaultMaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: DefaultKeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: DefaultMaxConnectionAge, MaxConnectionAgeGrace: DefaultMaxConnectionAgeGrace}),
		grpc.ChainUnaryInterceptor(s.recoverUnary),
		grpc.ChainStreamInterceptor(s.recoverStream),
	}, extra...)
	if s.door != nil {
		opts = append(opts, grpc.InTapHandle(s.door.tap)) // overload.go
	}
	g := grpc.NewServer(opts...)
	inference.RegisterGRPCInferenceServiceServer(g, s.GRPCService())
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	return g
}

// recoverUnary answers a panic in a unary method INTERNAL with a request id
// (ModelInfer recovers itself first, with the request's own id), counted and
// logged by api.Recovered; the server goes on serving.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, s.grpcFail("", "", api.Recovered("grpc", v))
		}
	}()
	return h(ctx, req)
}

// recoverStream is recoverUnary for streams (the health service's Watch).
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = s.grpcFail("", "", api.Recovered("grpc", v))
		}
	}()
	return h(srv, ss)
}

// grpcFail is fail's gRPC twin: a status with the code GRPCCode maps err to
// and the message fail writes; err's whole chain goes to the log.
func (s *Server) grpcFail(session, id string, err error) error {
	id = s.requestID(id)
	s.logFailure(session, id, err)
	return status.Error(GRPCCode(err), s.publicMessage(err, session)+" (request id "+id+")")
}

func (g *grpcService) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: g.s.ready.Load()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: "piccolo", Version: g.s.opts.Version, Extensions: []string{ExtensionBinaryData, ExtensionStatistics}}, nil
}

func (g *grpcService) ModelReady(ctx context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	if _, err := g.s.identifyGRPC(ctx); err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	if err := g.s.exec.CheckSession(req.GetName()); err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	if err := g.s.checkVersion(req.GetName(), req.GetVersion()); err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	return &inference.ModelReadyResponse{Ready: g.s.ready.Load()}, nil
}

func (g *grpcService) ModelMetadata(ctx context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	if _, err := g.s.identifyGRPC(ctx); err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	md, err := g.s.exec.Metadata(req.GetName())
	if err == nil {
		err = g.s.checkVersion(req.GetName(), req.GetVersion())
	}
	if err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	in, out := md.Inputs, md.Outputs
	conv := func(ts []gateway.TensorMeta) []*inference.ModelMetadataResponse_TensorMetadata {
		r := make([]*inference.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			r[i] = &inference.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return r
	}
	return &inference.ModelMetadataResponse{Name: md.Name, Versions: []string{SessionVersion}, Platform: "piccolo_session",
		Inputs: conv(in), Outputs: conv(out)}, nil
}

// ModelInfer runs one request. Inputs come from raw_input_contents (one entry per
// input) or, when that is empty, from each input's typed contents. The response
// carries outputs in raw_output_contents, the request's id, and the timings as
// double parameters. The client's deadline, if earlier than the SLO, is the
// request's deadline.
func (g *grpcService) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	status := http.StatusOK
	if d := g.s.door; d != nil { // the tap refused it at the door when full (overload.go)
		d.count()
		defer d.holdRepeatedGRPC(ctx, &status) // after exit (deferred calls run last first): a held refusal is not in flight
		defer d.exit()
	}
	start := time.Now()
	var span trace.Span
	if tracing.Enabled() {
		// The RPC's server span is the stats handler's (tracing.ServerOptions);
		// the request's is its child, and its traceparent goes back in the
		// response header, as on HTTP.
		ctx, span = tracing.StartRPC(ctx, req.GetModelName())
		if tp := tracing.Traceparent(ctx); tp != "" {
			_ = grpc.SetHeader(ctx, metadata.Pairs("traceparent", tp))
		}
	}
	var gresp gateway.InferResponse
	resp, err := g.modelInferRecovered(ctx, req, &gresp)
	if err != nil {
		status = HTTPStatus(err)
	}
	if span != nil {
		tracing.EndRPC(span, status)
	}
	took := time.Since(start)
	g.s.opts.Metrics.Observe(req.GetModelName(), true, status, took)
	g.s.stats.observe(g.s.exec, req.GetModelName(), status, took, &gresp)
	if err != nil {
		grpcRefusalHeader(ctx, err)
		return nil, g.s.grpcFail(req.GetModelName(), req.GetId(), err)
	}
	return resp, nil
}

// modelInferRecovered is modelInfer with a panic turned into ErrInternal
// (api.Recovered), which ModelInfer answers with the request's id.
func (g *grpcService) modelInferRecovered(ctx context.Context, req *inference.ModelInferRequest, gresp *gateway.InferResponse) (resp *inference.ModelInferResponse, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, api.Recovered("grpc", v)
		}
	}()
	return g.modelInfer(ctx, req, gresp)
}

// modelInfer answers ModelInfer; errors are the gateway's, not yet statuses.
func (g *grpcService) modelInfer(ctx context.Context, req *inference.ModelInferRequest, gresp *gateway.InferResponse) (*inference.ModelInferResponse, error) {
	session := req.GetModelName()
	var tn *tenants.Tenant // nil: tenants are off
	if g.s.opts.Tenants != nil {
		var err error
		if tn, err = g.s.identifyGRPC(ctx); err != nil {
			return nil, err
		}
	}
	if err := g.s.checkVersion(session, req.GetModelVersion()); err != nil {
		return nil, err
	}
	if err := g.s.exec.CheckSession(session); err != nil {
		return nil, err
	}
	if tn != nil { // before the tensors are read: a tenant over its limits costs no conversion
		if err := tn.Admit(); err != nil {
			return nil, err
		}
		defer tn.Done()
	}
	// The message is already in memory (grpc-go holds it to MaxRecvMsgSize);
	// its tensors' bytes, and the raw bytes typed contents convert to, are
	// the request's share of the in-flight budget until it is answered.
	h := hold{b: g.s.budget}
	defer h.release()
	n := 0
	for _, r := range req.GetRawInputContents() {
		n += len(r)
	}
	if err := h.take(n); err != nil {
		return nil, err
	}
	inputs, err := grpcInputs(req, &h)
	if err != nil {
		return nil, err
	}
	if len(req.GetId()) > MaxNameBytes {
		return nil, gateway.BadInput("id of %d bytes is over the limit of %d", len(req.GetId()), MaxNameBytes)
	}
	r := gateway.InferRequest{ID: req.GetId(), Inputs: inputs}
	if len(req.GetParameters()) > MaxParameters {
		return nil, gateway.BadInput("parameters: more than %d keys", MaxParameters)
	}
	for k := range req.GetParameters() {
		if len(k) > MaxNameBytes {
			return nil, checkParamKey("parameters", k)
		}
	}
	if err := grpcSchedule(req.GetParameters(), &r); err != nil {
		return nil, err
	}
	if tn != nil {
		if err := allowPriority(tn, r.Priority); err != nil {
			return nil, err
		}
	}
	if len(req.GetOutputs()) > MaxOutputs {
		return nil, gateway.BadInput("outputs: %d requested outputs, more than %d", len(req.GetOutputs()), MaxOutputs)
	}
	var names nameSet
	for i, o := range req.GetOutputs() {
		if o.GetName() == "" {
			return nil, gateway.BadInput("outputs: an output without a name")
		}
		if err := checkName("outputs", i, o.GetName()); err != nil {
			return nil, err
		}
		if len(o.GetParameters()) > MaxParameters {
			return nil, gateway.BadInput("outputs[%d]: parameters: more than %d keys", i, MaxParameters)
		}
		for k := range o.GetParameters() {
			if len(k) > MaxNameBytes {
				return nil, checkParamKey("outputs["+strconv.Itoa(i)+"]: parameters", k)
			}
		}
		if !names.add(o.GetName()) {
			return nil, gateway.BadInput("outputs[%d]: output %q is asked for twice", i, o.GetName())
		}
		r.Outputs = append(r.Outputs, o.GetName())
	}
	if err := g.s.exec.Infer(ctx, session, &r, gresp); err != nil {
		return nil, err
	}
	resp := gresp
	out := &inference.ModelInferResponse{
		ModelName:         resp.ModelName,
		Id:                resp.ID,
		Parameters:        make(map[string]*inference.InferParameter, len(resp.Parameters)),
		Outputs:           make([]*inference.ModelInferResponse_InferOutputTensor, len(resp.Outputs)),
		RawOutputContents: make([][]byte, len(resp.Outputs)),
	}
	for _, p := range resp.Parameters {
		out.Parameters[p.Key] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: p.Value}}
	}
	for i, t := range resp.Outputs {
		if err := t.Validate(); err != nil {
			return nil, gateway.WrapBackend(fmt.Sprintf("session %q output", session), err)
		}
		out.Outputs[i] = &inference.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		out.RawOutputContents[i] = t.Data
	}
	return out, nil
}

// ModelStatistics answers the statistics extension (stats.go) for one
// session, or every session when the name is empty.
func (g *grpcService) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	if _, err := g.s.identifyGRPC(ctx); err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	r, err := g.s.modelStatistics(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, g.s.grpcFail(req.GetName(), "", err)
	}
	return r, nil
}

// RepositoryIndex lists the sessions (stats.go, repositoryIndex). Loading and
// unloading stay unimplemented: the control plane places models.
func (g *grpcService) RepositoryIndex(ctx context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	if _, err := g.s.identifyGRPC(ctx); err != nil {
		return nil, g.s.grpcFail("", "", err)
	}
	return &inference.RepositoryIndexResponse{Models: g.s.repositoryIndex(req.GetReady())}, nil
}

// grpcSchedule reads Triton's schedule policy parameters, "timeout" (µs)
// and "priority", as int64 or uint64 parameters (docs/protocol.md). The
// call's own deadline (grpc-timeout) tightens the request's deadline in
// DAGRunner.Infer through ctx.
func grpcSchedule(params map[string]*inference.InferParameter, r *gateway.InferRequest) error {
	for _, key := range [...]string{"timeout", "priority"} {
		p, ok := params[key]
		if !ok {
			continue
		}
		var v int64
		switch c := p.GetParameterChoice().(type) {
		case *inference.InferParameter_Int64Param:
			v = c.Int64Param
		case *inference.InferParameter_Uint64Param:
			v = int64(min(c.Uint64Param, math.MaxInt64))
		default:
			return gateway.BadInput("parameters: %q must be an int64 or uint64 parameter", key)
		}
		if v < 0 {
			return gateway.BadInput("parameters: %q is %d; it must not be negative", key, v)
		}
		if key == "timeout" {
			r.Timeout = microseconds(v)
		} else {
			r.Priority = v
		}
	}
	return nil
}

// grpcInputs converts and validates a request's inputs.
func grpcInputs(req *inference.ModelInferRequest, h *hold) ([]api.Tensor, error) {
	ins := req.GetInputs()
	raw := req.GetRawInputContents()
	if len(ins) == 0 {
		return nil, gateway.BadInput("missing inputs: the request has no inputs")
	}
	if len(ins) > MaxInputs {
		return nil, gateway.BadInput("inputs: %d inputs, more than %d", len(ins), MaxInputs)
	}
	if len(raw) > 0 && len(raw) != len(ins) {
		return nil, gateway.BadInput("raw_input_contents has %d entries for %d inputs; want one per input, in order", len(raw), len(ins))
	}
	out := make([]api.Tensor, len(ins))
	var names nameSet
	for i, in := range ins {
		t := api.Tensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape()}
		if t.Name == "" {
			return nil, gateway.BadInput("inputs[%d]: missing name", i)
		}
		if err := checkName("inputs", i, t.Name); err != nil {
			return nil, err
		}
		if len(in.GetParameters()) > MaxParameters {
			return nil, gateway.BadInput("inputs[%d]: parameters: more than %d keys", i, MaxParameters)
		}
		for k := range in.GetParameters() {
			if len(k) > MaxNameBytes {
				return nil, checkParamKey("inputs["+strconv.Itoa(i)+"]: parameters", k)
			}
		}
		if !names.add(t.Name) {
			return nil, gateway.BadInput("inputs[%d]: input %q appears twice", i, t.Name)
		}
		dt := dtypeOf(t.Datatype)
		if dt == dtInvalid {
			return nil, gateway.BadInput("input %q: unknown datatype %q; allowed: %s", t.Name, t.Datatype, api.Datatypes)
		}
		if len(t.Shape) > maxDepth { // as the JSON decoder's decodeShape
			return nil, gateway.BadInput("input %q: shape has more than %d dimensions", t.Name, maxDepth)
		}
		if _, err := api.NumElements(t.Shape); err != nil {
			return nil, gateway.BadInput("input %q: %v", t.Name, err)
		}
		if len(raw) > 0 {
			if in.GetContents() != nil {
				return nil, gateway.BadInput("input %q: both contents and raw_input_contents are set; use one", t.Name)
			}
			t.Data = raw[i]
		} else {
			if in.GetContents() == nil {
				return nil, gateway.BadInput("input %q: no data: set contents or raw_input_contents", t.Name)
			}
			var err error
			if t.Data, err = typedToRaw(dt, in.GetContents()); err != nil {
				return nil, gateway.BadInput("input %q: %v", t.Name, err)
			}
			if err := h.take(len(t.Data)); err != nil {
				return nil, err
			}
		}
		if err := t.Validate(); err != nil {
			return nil, gateway.BadInput("%v", err)
		}
		out[i] = t
	}
	return out, nil
}

// typedToRaw encodes typed contents as raw little-endian bytes, checking that each
// value fits the datatype (the protocol carries INT8..INT32 in int32 fields).
func typedToRaw(dt dtype, c *inference.InferTensorContents) ([]byte, error) {
	name := dtypeNames[dt]
	var out []byte
	switch dt {
	case dtBool:
		out = make([]byte, len(c.GetBoolContents()))
		for i, v := range c.GetBoolContents() {
			if v {
				out[i] = 1
			}
		}
	case dtInt8, dtInt16, dtInt32:
		lo, hi := intRange(dt)
		size := api.ElementSize(name)
		out = make([]byte, 0, size*len(c.GetIntContents()))
		for i, v := range c.GetIntContents() {
			if int64(v) < lo || int64(v) > hi {
				return nil, fmt.Errorf("int_contents[%d] = %d is out of range for %s (%d..%d)", i, v, name, lo, hi)
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(v))[:len(out)+size]
		}
	case dtUint8, dtUint16, dtUint32:
		_, hi := intRange(dt)
		size := api.ElementSize(name)
		out = make([]byte, 0, size*len(c.GetUintContents()))
		for i, v := range c.GetUintContents() {
			if int64(v) > hi {
				return nil, fmt.Errorf("uint_contents[%d] = %d is out of range for %s (0..%d)", i, v, name, hi)
			}
			out = binary.LittleEndian.AppendUint32(out, v)[:len(out)+size]
		}
	case dtInt64:
		for _, v := range c.GetInt64Contents() {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case dtUint64:
		for _, v := range c.GetUint64Contents() {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	case dtFP32:
		for _, v := range c.GetFp32Contents() {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	case dtFP64:
		for _, v := range c.GetFp64Contents() {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	case dtBytes:
		for _, v := range c.GetBytesContents() {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
			out = append(out, v...)
		}
	default: // FP16, BF16
		return nil, fmt.Errorf("%s has no typed contents in the protocol; send it in raw_input_contents", name)
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}
