package backends

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// MaxMessageBytes is the default limit of one gRPC message, both ways, for the
// server and the client: a stacked batch of images is far above gRPC's 4 MiB.
const MaxMessageBytes = 256 << 20

// Load parameters accepted by RepositoryModelLoad, as int64_param or as a
// decimal string_param.
const (
	ParamBatch       = "batch"       // max batch size, items (dimension 0)
	ParamConcurrency = "concurrency" // lanes: batches running at once
)

// ParamFanOut is the response parameter (bool_param true) by which the Server
// says that the answering model fans out (ModelInfo.FanOut): its outputs' rows
// all belong to the request's one item, however many there are.
const ParamFanOut = "piccolo_fan_out"

// fanOutParams is the parameters map of every fan-out response; never mutated.
var fanOutParams = map[string]*inference.InferParameter{
	ParamFanOut: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
}

// ServerOptions configure a Server. The zero value is usable.
type ServerOptions struct {
	Name    string      // ServerMetadata name; default "piccolo"
	Version string      // ServerMetadata version; default "dev"
	Logger  *zap.Logger // load, unload and panics; never per request. Default: no logs.
	Metrics *Metrics    // default: none recorded
	// HoldBytes bounds the bytes of the outputs the server keeps when a
	// gateway asks it to (ParamHold, docs/locality.md); 0: it keeps none and
	// answers every hold not held. HoldTTL is how long it keeps each (default
	// DefaultHoldTTL).
	HoldBytes int64
	HoldTTL   time.Duration
}

// Server serves the KServe v2 GRPCInferenceService over one Executor.
//
// Its gRPC health service (grpc.health.v1, for the overall service "" and for
// HealthService) answers NOT_SERVING until Serve, SERVING from then, and
// NOT_SERVING again from Drain on; ServerReady answers true until Drain.
//
// ModelInfer reads the table of loaded models from an immutable snapshot, without
// a lock; RepositoryModelLoad and RepositoryModelUnload are serialized by a mutex
// and publish a new snapshot. Bad requests get INVALID_ARGUMENT naming the tensor;
// a panicking executor gets INTERNAL, and the server goes on.
type Server struct {
	inference.UnimplementedGRPCInferenceServiceServer

	exec    Executor
	name    string
	version string
	log     *zap.Logger

	metrics  *Metrics
	health   *health.Server                     // grpc.health.v1: NOT_SERVING until Serve, again from Drain
	mu       sync.Mutex                         // serializes load and unload
	models   atomic.Pointer[map[string]*loaded] // snapshot; replaced, never mutated
	draining atomic.Bool
	panics   atomic.Int64
	held     *heldStore // nil: ServerOptions.HoldBytes 0
}

var _ inference.GRPCInferenceServiceServer = (*Server)(nil)

// loaded is one entry of the loaded-model snapshot; immutable but for refs.
//
// Make-before-break: refs counts the holders of model, 1 for the table while
// it lists the entry plus 1 for each ModelInfer running a batch on it. Unload
// and a reload drop the table's reference; whoever drops the last one closes
// model, so a model is never closed under a batch that uses it (a fused chain
// reaching a step, an ONNX batch waiting for a lane) and is closed as soon as
// the last such batch returns. Once refs is 0 it stays 0: acquire fails, and
// ModelInfer looks the model up again in the newer table.
type loaded struct {
	model   Model
	info    ModelInfo
	metrics modelMetrics
	// batch and concurrency are what Load was asked for (0: the executor's
	// default): a Load asking the same again keeps this model.
	batch, concurrency int
	refs               atomic.Int64
}

// acquire takes a reference for one batch; false once the model is retired
// and closed (or closing).
func (l *loaded) acquire() bool {
	for {
		n := l.refs.Load()
		if n <= 0 {
			return false
		}
		if l.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last one closes the model, on a goroutine of
// its own when async (a batch's: its answer does not wait for the close).
func (l *loaded) release(log *zap.Logger, async bool) {
	if l.refs.Add(-1) != 0 {
		return
	}
	closeModel := func() {
		if err := l.model.Close(); err != nil {
			log.Warn("close model", zap.String("model", l.info.Name), zap.Error(err))
		}
	}
	if async {
		go closeModel()
		return
	}
	closeModel()
}

// NewServer returns a Server running models on exec, with no model loaded.
func NewServer(exec Executor, opts ServerOptions) (*Server, error) {
	if exec == nil {
		return nil, fmt.Errorf("backends: NewServer: executor is nil")
	}
	s := &Server{exec: exec, name: opts.Name, version: opts.Version, log: opts.Logger, metrics: opts.Metrics}
	if s.name == "" {
		s.name = "piccolo"
	}
	if s.version == "" {
		s.version = "dev"
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if opts.HoldBytes < 0 || opts.HoldTTL < 0 {
		return nil, fmt.Errorf("backends: NewServer: hold bytes %d and hold TTL %v must be ≥ 0", opts.HoldBytes, opts.HoldTTL)
	}
	if opts.HoldBytes > 0 {
		var gauge prometheus.Gauge
		if opts.Metrics != nil {
			gauge = opts.Metrics.held
		}
		s.held = newHeldStore(opts.HoldBytes, opts.HoldTTL, gauge)
	}
	empty := map[string]*loaded{}
	s.models.Store(&empty)
	s.health = health.NewServer()
	for _, svc := range []string{"", HealthService} {
		s.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return s, nil
}

// HealthService is the service name, besides the overall "", whose status the
// gRPC health service reports: the KServe v2 inference service.
const HealthService = "inference.GRPCInferenceService"

// Serve makes the gRPC health service answer SERVING: call it once the models
// to preload are loaded and the listener accepts. After Drain it does nothing.
func (s *Server) Serve() {
	for _, svc := range []string{"", HealthService} {
		s.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
}

// NewGRPCServer returns a grpc.Server with s registered, its gRPC health
// service, server reflection (so that `grpcurl -plaintext ADDR list` works),
// message limits of MaxMessageBytes and a keepalive policy that accepts the
// Client's pings. Extra options are appended.
func NewGRPCServer(s *Server, extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, extra...)
	g := grpc.NewServer(opts...)
	inference.RegisterGRPCInferenceServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	return g
}

// Load loads (or reloads with new settings) model with the given max batch and
// concurrency; zero asks for the executor's default. It is what
// RepositoryModelLoad does, callable in-process (e.g. to preload at start).
//
// Make-before-break: a reload loads (and, for an executor that warms up, warms)
// the new model before the table lists it, and the model it replaces is closed
// only after the last batch running on it returns; a Load asking for the
// settings the model is loaded with changes nothing (a plan change that keeps
// a model pays no load).
func (s *Server) Load(model string, batch, concurrency int) (ModelInfo, error) {
	if model == "" {
		return ModelInfo{}, fmt.Errorf("%w: model name is empty", ErrInvalidInput)
	}
	if batch < 0 || concurrency < 0 {
		return ModelInfo{}, fmt.Errorf("model %q: %w: batch %d and concurrency %d must be ≥ 1 (0: default)", model, ErrInvalidInput, batch, concurrency)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := (*s.models.Load())[model]; ok && cur.batch == batch && cur.concurrency == concurrency {
		return cur.info, nil
	}
	m, err := s.exec.Load(model, batch, concurrency)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("load model %q: %w", model, err)
	}
	info := m.Info()
	if info.FanOut && info.MaxBatch != 1 {
		_ = m.Close()
		return ModelInfo{}, fmt.Errorf("load model %q: %w: it fans out (any number of output rows for one item), so it runs batch 1 only, not %d", model, ErrInvalidInput, info.MaxBatch)
	}
	old := *s.models.Load()
	next := make(map[string]*loaded, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	prev := next[model]
	l := &loaded{model: m, info: info, metrics: s.metrics.forModel(info), batch: batch, concurrency: concurrency}
	l.refs.Store(1) // the table's
	next[model] = l
	s.models.Store(&next)
	if prev != nil {
		prev.release(s.log, false) // closed now, or by its last batch
	}
	s.log.Info("model loaded", zap.String("model", model), zap.Int("batch", info.MaxBatch), zap.Int("concurrency", info.Concurrency))
	return info, nil
}

// Unload unloads model: ModelInfer calls from now on answer that it is not
// loaded; batches in flight finish on it, and the last one to return closes
// it (make-before-break). Unloading a model that the executor knows but that
// is not loaded succeeds; an unknown one wraps ErrUnknownModel.
func (s *Server) Unload(model string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.models.Load()
	m, ok := old[model]
	if !ok {
		if !s.knows(model) {
			return fmt.Errorf("unload model %q: %w; this backend has: %s", model, ErrUnknownModel, strings.Join(s.exec.Models(), ", "))
		}
		return nil
	}
	next := make(map[string]*loaded, len(old))
	for k, v := range old {
		if k != model {
			next[k] = v
		}
	}
	s.models.Store(&next)
	s.metrics.unloaded(model)
	m.release(s.log, false)
	s.log.Info("model unloaded", zap.String("model", model))
	return nil
}

// Loaded returns the info of every loaded model.
func (s *Server) Loaded() []ModelInfo {
	m := *s.models.Load()
	out := make([]ModelInfo, 0, len(m))
	for _, v := range m {
		out = append(out, v.info)
	}
	return out
}

// Drain makes ServerReady answer false and the health service NOT_SERVING
// (for good: a later Serve changes nothing), so that balancers and probes stop
// sending work before the server stops. Requests still in flight or arriving
// are served.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.health.Shutdown()
}

// Panics returns how many ModelInfer calls ended in a recovered executor panic.
func (s *Server) Panics() int64 { return s.panics.Load() }

func (s *Server) knows(model string) bool {
	for _, m := range s.exec.Models() {
		if m == model {
			return true
		}
	}
	return false
}

// acquire returns the loaded model with a reference taken for one batch
// (release it), or an error saying why there is none. A model retired between
// the table's load and the reference is looked up again: the newer table has
// its replacement, or says it is unloaded.
func (s *Server) acquire(model string) (*loaded, error) {
	for {
		m, err := s.lookup(model)
		if err != nil {
			return nil, err
		}
		if m.acquire() {
			return m, nil
		}
	}
}

// lookup returns the loaded model, or an error saying why there is none.
func (s *Server) lookup(model string) (*loaded, error) {
	if m, ok := (*s.models.Load())[model]; ok {
		return m, nil
	}
	if s.knows(model) {
		return nil, fmt.Errorf("model %q: %w: load it with RepositoryModelLoad first", model, ErrModelNotLoaded)
	}
	return nil, fmt.Errorf("model %q: %w on this backend; it can load: %s", model, ErrUnknownModel, strings.Join(s.exec.Models(), ", "))
}

// ServerLive answers true while the process serves.
func (s *Server) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

// ServerReady answers true until Drain.
func (s *Server) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: !s.draining.Load()}, nil
}

// ModelReady answers true when the model is loaded; false (not an error) when it
// is not, loadable or not.
func (s *Server) ModelReady(_ context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	_, ok := (*s.models.Load())[req.GetName()]
	return &inference.ModelReadyResponse{Ready: ok}, nil
}

// ServerMetadata reports the server's name, version and the model_repository extension.
func (s *Server) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: s.name, Version: s.version, Extensions: []string{"model_repository"}}, nil
}

// ModelMetadata reports a loaded model's inputs and outputs; NOT_FOUND or
// FAILED_PRECONDITION when it is unknown or not loaded.
func (s *Server) ModelMetadata(_ context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	m, err := s.lookup(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	info := m.info
	return &inference.ModelMetadataResponse{
		Name:     info.Name,
		Versions: []string{"1"},
		Platform: info.Platform,
		Inputs:   specsToProto(info.Inputs),
		Outputs:  specsToProto(info.Outputs),
	}, nil
}

func specsToProto(specs []TensorSpec) []*inference.ModelMetadataResponse_TensorMetadata {
	out := make([]*inference.ModelMetadataResponse_TensorMetadata, len(specs))
	for i, t := range specs {
		out[i] = &inference.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return out
}

// RepositoryIndex lists every model the executor can load, READY or UNAVAILABLE.
func (s *Server) RepositoryIndex(_ context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	loaded := *s.models.Load()
	resp := &inference.RepositoryIndexResponse{}
	for _, name := range s.exec.Models() {
		e := &inference.RepositoryIndexResponse_ModelIndex{Name: name, Version: "1", State: "UNAVAILABLE", Reason: "unloaded"}
		if _, ok := loaded[name]; ok {
			e.State, e.Reason = "READY", ""
		} else if req.GetReady() {
			continue
		}
		resp.Models = append(resp.Models, e)
	}
	return resp, nil
}

// RepositoryModelLoad loads or reloads a model. Parameters: "batch" and
// "concurrency", each an int64_param or a decimal string_param, both optional
// (default: the executor's, for the sim its largest profiled entry). Any other
// parameter is rejected with INVALID_ARGUMENT.
func (s *Server) RepositoryModelLoad(_ context.Context, req *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	var batch, concurrency int
	for key, p := range req.GetParameters() {
		var dst *int
		switch key {
		case ParamBatch:
			dst = &batch
		case ParamConcurrency:
			dst = &concurrency
		default:
			return nil, status.Errorf(codes.InvalidArgument, "model %q: load parameter %q is not supported; allowed: %s, %s", req.GetModelName(), key, ParamBatch, ParamConcurrency)
		}
		v, err := intParam(p)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "model %q: load parameter %q: %v", req.GetModelName(), key, err)
		}
		*dst = v
	}
	if _, err := s.Load(req.GetModelName(), batch, concurrency); err != nil {
		return nil, toStatus(err)
	}
	return &inference.RepositoryModelLoadResponse{}, nil
}

// intParam reads a positive int from an int64_param or a decimal string_param.
func intParam(p *inference.ModelRepositoryParameter) (int, error) {
	var v int64
	switch c := p.GetParameterChoice().(type) {
	case *inference.ModelRepositoryParameter_Int64Param:
		v = c.Int64Param
	case *inference.ModelRepositoryParameter_StringParam:
		n, err := strconv.ParseInt(strings.TrimSpace(c.StringParam), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number", c.StringParam)
		}
		v = n
	default:
		return 0, fmt.Errorf("want an int64_param or a decimal string_param")
	}
	if v < 1 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%d is out of range; want 1 to %d", v, math.MaxInt32)
	}
	return int(v), nil
}

// RepositoryModelUnload unloads a model; NOT_FOUND when the backend does not know it.
func (s *Server) RepositoryModelUnload(_ context.Context, req *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	if len(req.GetParameters()) > 0 {
		for key := range req.GetParameters() {
			return nil, status.Errorf(codes.InvalidArgument, "model %q: unload parameter %q is not supported; none are", req.GetModelName(), key)
		}
	}
	if err := s.Unload(req.GetModelName()); err != nil {
		return nil, toStatus(err)
	}
	return &inference.RepositoryModelUnloadResponse{}, nil
}

// ModelInfer validates the request against the loaded model, runs one batch and
// answers with raw_output_contents, and with the batch's Timing as the
// parameters ParamQueueNanos and ParamComputeNanos (RunTimed). Codes: NOT_FOUND (unknown model),
// FAILED_PRECONDITION (not loaded), INVALID_ARGUMENT (bad tensor or batch larger
// than the loaded max batch, naming the tensor), DEADLINE_EXCEEDED/CANCELLED,
// INTERNAL (executor failure or panic).
func (s *Server) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (resp *inference.ModelInferResponse, err error) {
	m, err := s.acquire(req.GetModelName())
	if err != nil {
		return nil, toStatus(err)
	}
	info := &m.info
	defer func() {
		m.release(s.log, true)
		if r := recover(); r != nil {
			s.panics.Add(1)
			resp, err = nil, status.Errorf(codes.Internal, "model %q: executor panicked: %v", info.Name, r)
		}
		if err != nil {
			m.metrics.failed(status.Code(err).String())
		}
	}()
	inputs, n, referenced, err := requestInputs(info, req, s.held)
	if errors.Is(err, ErrHeldMissing) {
		return nil, toStatus(fmt.Errorf("model %q: %w", info.Name, err))
	}
	if err != nil {
		return nil, toStatus(fmt.Errorf("model %q: %w: %v", info.Name, ErrInvalidInput, err))
	}
	hold, holding, err := holdParam(req)
	if err != nil {
		return nil, toStatus(fmt.Errorf("model %q: %w: %v", info.Name, ErrInvalidInput, err))
	}
	if err := checkRequestedOutputs(info, req.GetOutputs()); err != nil {
		return nil, toStatus(fmt.Errorf("model %q: %w: %v", info.Name, ErrInvalidInput, err))
	}
	start := time.Now()
	outputs, timing, err := RunTimed(ctx, m.model, inputs, n)
	if err != nil {
		return nil, toStatus(fmt.Errorf("model %q: batch of %d: %w", info.Name, n, err))
	}
	resp, err = inferResponse(req, info, outputs, n)
	if err == nil {
		resp.Parameters = timingParams(timing, info.FanOut)
		if holding && s.held != nil && s.held.hold(hold, responseTensors(resp), n, info.FanOut) {
			resp.Parameters[ParamHeld] = heldTrue
		}
		m.metrics.ok(n, time.Since(start).Seconds(), req.GetRawInputContents(), resp.RawOutputContents, referenced)
	}
	return resp, err
}

// requestInputs turns the request's inputs into tensors (Data aliasing the
// request, or rebuilt from held tensors where an input names them with
// ParamRefs: a held key not in held wraps ErrHeldMissing) and checks them
// against info; it returns the batch size n and the bytes taken from held.
func requestInputs(info *ModelInfo, req *inference.ModelInferRequest, held *heldStore) (_ []api.Tensor, n, referenced int, _ error) {
	in := req.GetInputs()
	raw := req.GetRawInputContents()
	if len(in) == 0 {
		return nil, 0, 0, fmt.Errorf("request has no inputs")
	}
	if len(raw) != 0 && len(raw) != len(in) {
		return nil, 0, 0, fmt.Errorf("request has %d inputs but %d raw_input_contents; want one per input, in order", len(in), len(raw))
	}
	tensors := make([]api.Tensor, len(in))
	for i, t := range in {
		name := t.GetName()
		if name == "" {
			return nil, 0, 0, fmt.Errorf("input %d has no name", i)
		}
		for _, prev := range in[:i] {
			if prev.GetName() == name {
				return nil, 0, 0, fmt.Errorf("input %q appears twice", name)
			}
		}
		tensors[i] = api.Tensor{Name: name, Datatype: t.GetDatatype(), Shape: t.GetShape()}
		switch {
		case len(raw) != 0:
			if t.GetContents() != nil {
				return nil, 0, 0, fmt.Errorf("input %q has both contents and raw_input_contents; send one", name)
			}
			tensors[i].Data = raw[i]
		case t.GetContents() != nil:
			data, err := contentsToRaw(t.GetDatatype(), t.GetContents())
			if err != nil {
				return nil, 0, 0, fmt.Errorf("input %q: %v", name, err)
			}
			tensors[i].Data = data
		}
		if p, ok := t.GetParameters()[ParamRefs]; ok {
			got, err := held.resolveRefs(&tensors[i], p.GetStringParam(), tensors[i].Data)
			if err != nil {
				return nil, 0, 0, err
			}
			referenced += got
		}
		if err := tensors[i].Validate(); err != nil {
			return nil, 0, 0, err
		}
		if err := checkSpec(info, &tensors[i]); err != nil {
			return nil, 0, 0, err
		}
	}
	rows, err := api.Rows(tensors) // the batch size
	if err != nil {
		return nil, 0, 0, err
	}
	if !info.AnyInputs && len(in) != len(info.Inputs) {
		for _, spec := range info.Inputs {
			if !hasInput(in, spec.Name) {
				return nil, 0, 0, fmt.Errorf("input %q is missing", spec.Name)
			}
		}
	}
	if rows < 1 {
		return nil, 0, 0, fmt.Errorf("batch of %d items; want at least 1 in dimension 0", rows)
	}
	if rows > int64(info.MaxBatch) {
		return nil, 0, 0, fmt.Errorf("batch of %d items exceeds the loaded max batch %d", rows, info.MaxBatch)
	}
	return tensors, int(rows), referenced, nil
}

func hasInput(in []*inference.ModelInferRequest_InferInputTensor, name string) bool {
	for _, t := range in {
		if t.GetName() == name {
			return true
		}
	}
	return false
}

// checkSpec checks t against the model's declared input of the same name.
func checkSpec(info *ModelInfo, t *api.Tensor) error {
	for _, spec := range info.Inputs {
		if spec.Name != t.Name {
			continue
		}
		if spec.Datatype != t.Datatype {
			return fmt.Errorf("input %q: datatype %s; the model wants %s", t.Name, t.Datatype, spec.Datatype)
		}
		if len(spec.Shape) != len(t.Shape) {
			return fmt.Errorf("input %q: shape %v has %d dimensions; the model wants %v", t.Name, t.Shape, len(t.Shape), spec.Shape)
		}
		for d := 1; d < len(spec.Shape); d++ {
			if spec.Shape[d] >= 0 && spec.Shape[d] != t.Shape[d] {
				return fmt.Errorf("input %q: shape %v; the model wants %v (-1: any)", t.Name, t.Shape, spec.Shape)
			}
		}
		return nil
	}
	if info.AnyInputs {
		return nil
	}
	names := make([]string, len(info.Inputs))
	for i, spec := range info.Inputs {
		names[i] = spec.Name
	}
	return fmt.Errorf("input %q is not an input of the model; its inputs: %s", t.Name, strings.Join(names, ", "))
}

func checkRequestedOutputs(info *ModelInfo, want []*inference.ModelInferRequest_InferRequestedOutputTensor) error {
	for _, w := range want {
		found := false
		for _, o := range info.Outputs {
			if o.Name == w.GetName() {
				found = true
				break
			}
		}
		if !found {
			names := make([]string, len(info.Outputs))
			for i, o := range info.Outputs {
				names[i] = o.Name
			}
			return fmt.Errorf("requested output %q is not an output of the model; its outputs: %s", w.GetName(), strings.Join(names, ", "))
		}
	}
	return nil
}

// inferResponse builds the response from the executor's outputs, keeping only
// the requested ones (all when none is named), after checking them: an executor
// that breaks its contract gets INTERNAL, not a malformed response.
func inferResponse(req *inference.ModelInferRequest, info *ModelInfo, outputs []api.Tensor, n int) (*inference.ModelInferResponse, error) {
	want := req.GetOutputs()
	resp := &inference.ModelInferResponse{ModelName: info.Name, ModelVersion: "1", Id: req.GetId()}
	rows := int64(n)
	if info.FanOut {
		// Any row count, the same for every output: the first sets it.
		resp.Parameters = fanOutParams
		rows = -1
	}
	count := len(outputs)
	if len(want) > 0 {
		count = len(want)
	}
	resp.Outputs = make([]*inference.ModelInferResponse_InferOutputTensor, 0, count)
	resp.RawOutputContents = make([][]byte, 0, count)
	add := func(t *api.Tensor) error {
		if err := t.Validate(); err != nil {
			return status.Errorf(codes.Internal, "model %q: executor output: %v", info.Name, err)
		}
		if rows < 0 && len(t.Shape) > 0 {
			rows = t.Shape[0]
		}
		if len(t.Shape) == 0 || t.Shape[0] != rows {
			if info.FanOut {
				return status.Errorf(codes.Internal, "model %q: executor output %q has shape %v; a fan-out model's outputs must agree on dimension 0 (%d rows)", info.Name, t.Name, t.Shape, rows)
			}
			return status.Errorf(codes.Internal, "model %q: executor output %q has shape %v; want %d items in dimension 0", info.Name, t.Name, t.Shape, n)
		}
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
		resp.RawOutputContents = append(resp.RawOutputContents, t.Data)
		return nil
	}
	if len(want) == 0 {
		for i := range outputs {
			if err := add(&outputs[i]); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
	for _, w := range want {
		i := 0
		for i < len(outputs) && outputs[i].Name != w.GetName() {
			i++
		}
		if i == len(outputs) {
			return nil, status.Errorf(codes.Internal, "model %q: executor did not produce output %q", info.Name, w.GetName())
		}
		if err := add(&outputs[i]); err != nil {
			return nil, err
		}
	}
	return resp, nil
}
