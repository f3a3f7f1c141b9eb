package kserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/tenants"
	"github.com/piccolo-serving/piccolo/tracing"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	"go.opentelemetry.io/otel/trace"
)

// ExtensionBinaryData is the name server metadata lists for the binary tensor
// data extension, which the HTTP server implements (binary.go).
const ExtensionBinaryData = "binary_tensor_data"

// DefaultMaxBodyBytes is the default limit of an HTTP request body or gRPC message.
const DefaultMaxBodyBytes = 64 << 20

// The connection limits' defaults (ServerOptions; docs/security.md).
const (
	// DefaultHeaderTimeout bounds how long a client may take to send a
	// request's headers: a connection holding a half-sent request is
	// closed after it (408), whatever the body timeout.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds how long a client may take to send a
	// request's body once its headers are in.
	DefaultBodyTimeout = time.Minute
	// DefaultWriteTimeout bounds how long writing a response may take (a
	// client that does not read its answer).
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout closes keep-alive connections idle longer.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnsPerIP caps the open HTTP connections of one client
	// address; more are refused at once. High, because clients behind one
	// NAT or load balancer share an address.
	DefaultMaxConnsPerIP = 4096
	// DefaultMaxConcurrentStreams caps the concurrent calls of one gRPC
	// connection.
	DefaultMaxConcurrentStreams = 1024
	// DefaultMaxConnectionAge is how long a gRPC connection lives before
	// the server asks its client to reconnect (GOAWAY), so that clients
	// spread over gateways again; calls in flight get
	// DefaultMaxConnectionAgeGrace to finish.
	DefaultMaxConnectionAge      = 30 * time.Minute
	DefaultMaxConnectionAgeGrace = time.Minute
	// DefaultKeepaliveMinTime is the shortest interval between a gRPC
	// client's keepalive pings the server accepts; a client pinging more
	// often is sent GOAWAY (too_many_pings).
	DefaultKeepaliveMinTime = 10 * time.Second
)

// ServerOptions configures the client-facing servers.
type ServerOptions struct {
	// MaxBodyBytes limits a request body (HTTP) or message (gRPC), compressed
	// and after decompression; over it, HTTP answers 413 and gRPC
	// RESOURCE_EXHAUSTED. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Version is reported by server metadata.
	Version string
	// Metrics, when set, counts requests and serves GET /metrics on the HTTP port.
	Metrics *metrics.Metrics
	// Logger receives one line per failed request, with the session and the
	// request id: at warn for the gateway's and backends' failures (5xx), at
	// debug for the client's (4xx). Nothing is logged for a request that
	// succeeds. Nil logs nothing.
	Logger *zap.Logger
	// HeaderTimeout, BodyTimeout, WriteTimeout and IdleTimeout bound the
	// HTTP connections (0: DefaultHeaderTimeout, DefaultBodyTimeout,
	// DefaultWriteTimeout, DefaultIdleTimeout).
	HeaderTimeout, BodyTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConnsPerIP caps one client address's open HTTP connections (0:
	// DefaultMaxConnsPerIP; < 0: no cap).
	MaxConnsPerIP int
	// MaxInflightBytes is the in-flight bytes budget: the request bytes
	// (bodies, decompressed bodies, decoded tensors) all requests being
	// served may hold together; a request that would go past it is refused
	// 503 with Retry-After (gRPC RESOURCE_EXHAUSTED) and counted in
	// piccolo_gateway_inflight_refused_total. 0 means DefaultInflightBytes
	// (a fifth of the cgroup memory limit); < 0 turns the budget off.
	MaxInflightBytes int64
	// AdminApart serves the admin API, /metrics and pprof on the admin
	// listener only (NewAdminHTTPServer, HandleAdminHTTP): the client port
	// serves inference, health and metadata, and answers 404 for the rest.
	// Without it the client port serves /admin/ and /metrics too (one port:
	// tests, and a gateway that listens on loopback only).
	AdminApart bool
	// Admin, when set, serves the admin API under /admin/ on the HTTP port
	// (controlplane.Admin.Handle); without it /admin/ answers 404 saying the API
	// is off.
	Admin fasthttp.RequestHandler
	// Overload, when set, turns on the door, the gateway's own overload
	// control (overload.go); nil: off, every request goes on to decoding and
	// admission. It reads the whole process's scheduler, so it belongs in a
	// process that serves the gateway alone (not one that also runs the
	// load or the backends, as piccolo demo and tests do).
	Overload *OverloadOptions
	// Tenants, when set, asks every model route (infer, metadata, ready,
	// statistics, the repository index) for an API key (HTTP
	// `Authorization: Bearer <key>` or `X-API-Key`; gRPC metadata
	// authorization or x-api-key) and holds each infer request to its
	// tenant's rate, concurrency and highest priority class: 401 with
	// WWW-Authenticate, 429 with Retry-After, 403 (docs/security.md,
	// "Tenants"). Health and server metadata stay open. Nil: off.
	Tenants *tenants.Tenants
}

// Server serves the DAGRunner's sessions as KServe v2 models over HTTP (fasthttp)
// and gRPC. Every method is safe for concurrent use; the handlers run on the
// servers' goroutines and block them for the duration of one request.
type Server struct {
	exec  *gateway.DAGRunner
	opts  ServerOptions
	ready atomic.Bool // the one readiness fact; health mirrors it for gRPC
	// idPrefix and idSeq make the ids of failed requests that came without one.
	idPrefix string
	idSeq    atomic.Uint64
	health   *health.Server // grpc.health.v1, services "" and HealthService
	bufs     sync.Pool      // *[]byte response buffers
	stats    stats          // the statistics extension's counters (stats.go)
	door     *door          // nil: overload control off (overload.go)

	// budget is the in-flight bytes budget (budget.go); nil: none.
	budget *inflightBudget
	// bodyConfig is what HeaderReceived answers: the body's read timeout.
	bodyConfig fasthttp.RequestConfig
}

// HealthService is the service name, besides the overall "", whose status the
// gRPC health service (grpc.health.v1) reports: the KServe v2 inference
// service, as on the backends.
var HealthService = inference.GRPCInferenceService_ServiceDesc.ServiceName

// NewServer returns a server over exec. It starts ready (the wiring builds it
// once the plan is live and the backends' models are loaded); SetReady(false)
// makes the readiness endpoints answer 503 and the gRPC health service
// NOT_SERVING (e.g. while draining on shutdown).
func NewServer(exec *gateway.DAGRunner, opts ServerOptions) (*Server, error) {
	if exec == nil {
		return nil, errors.New("kserve: NewServer needs a gateway.DAGRunner")
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("kserve: max body %d bytes is negative", opts.MaxBodyBytes)
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&opts.HeaderTimeout, DefaultHeaderTimeout}, {&opts.BodyTimeout, DefaultBodyTimeout}, {&opts.WriteTimeout, DefaultWriteTimeout}, {&opts.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v < 0 {
			return nil, fmt.Errorf("kserve: timeout %v is negative", *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if opts.MaxConnsPerIP == 0 {
		opts.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if opts.MaxInflightBytes == 0 {
		opts.MaxInflightBytes = DefaultInflightBytes(opts.MaxBodyBytes)
	}
	s := &Server{exec: exec, opts: opts, health: health.NewServer(), idPrefix: fmt.Sprintf("piccolo-%08x-", rand.Uint32())}
	if opts.Overload != nil {
		o, err := opts.Overload.withDefaults()
		if err != nil {
			return nil, err
		}
		s.door = newDoor(o, newSchedDelay())
	}
	api.ReportPanics(reportPanic(opts.Metrics, opts.Logger))
	s.bodyConfig.ReadTimeout = opts.BodyTimeout
	if opts.MaxInflightBytes > 0 {
		s.budget = &inflightBudget{limit: opts.MaxInflightBytes, m: opts.Metrics}
	}
	s.SetReady(true)
	if opts.Metrics != nil {
		opts.Metrics.SetDAGRunner(exec)
	}
	return s, nil
}

// SetReady sets what /v2/health/ready, /v2/models/{session}/ready, ServerReady,
// ModelReady and the gRPC health service (services "" and HealthService:
// SERVING or NOT_SERVING) answer. Not for the request path: it takes the
// health server's lock and wakes its Watch streams.
func (s *Server) SetReady(ready bool) {
	s.ready.Store(ready)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, svc := range []string{"", HealthService} {
		s.health.SetServingStatus(svc, st)
	}
}

// NewHTTPServer returns a fasthttp server with the KServe v2 routes, the body limit
// and JSON errors for requests fasthttp itself rejects. Responses are
// compressed when the request's Accept-Encoding allows (gzip, deflate or zstd
// at the fastest level; fasthttp's CompressHandlerLevel, which leaves bodies
// under 200 bytes as they are); request bodies may be compressed too
// (requestBody).
func (s *Server) NewHTTPServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               fasthttp.CompressHandlerLevel(s.recoverHTTP, fasthttp.CompressBestSpeed),
		Name:                  "piccolo",
		MaxRequestBodySize:    s.opts.MaxBodyBytes,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		// The read timeout covers the headers; once they are in, the body
		// gets its own (HeaderReceived), so a half-sent request holds its
		// connection for HeaderTimeout, not the body's minute.
		ReadTimeout:    s.opts.HeaderTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig { return s.bodyConfig },
		WriteTimeout:   s.opts.WriteTimeout,
		IdleTimeout:    s.opts.IdleTimeout, // keep-alive connections idle longer are closed
		ConnState:      s.connState(),
		Logger:         discardLogger{}, // connection errors are answered, not logged per request
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				// Nothing was read before the read timeout: a connection a
				// client's pool opened and never used. An answer would reach
				// the client as an unsolicited response on an idle
				// connection; close it without one.
				_ = ctx.Conn().Close()
				return
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				writeError(ctx, gateway.Public(errRequestTimeout, "%v: the request was not received within the read timeout", errRequestTimeout))
				return
			}
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				writeError(ctx, gateway.Public(gateway.ErrTooLarge, "%v: the body is over the limit of %d bytes (--max-body)", gateway.ErrTooLarge, s.opts.MaxBodyBytes))
				return
			}
			if ne := net.Error(nil); errors.As(err, &ne) {
				// A socket error names the server's and the client's
				// addresses: not for the answer.
				writeError(ctx, gateway.BadInput("malformed HTTP request: the connection failed while it was read"))
				return
			}
			writeError(ctx, gateway.BadInput("malformed HTTP request: %v", err))
		},
	}
}

// connState is the client port's ConnState hook: the per-address cap
// (ipConns), nil without one.
func (s *Server) connState() func(net.Conn, fasthttp.ConnState) {
	if s.opts.MaxConnsPerIP <= 0 {
		return nil
	}
	return newIPConns(s.opts.MaxConnsPerIP).state
}

// NewAdminHTTPServer returns the admin listener's server (with
// ServerOptions.AdminApart): HandleAdminHTTP under a recover, with the
// client port's timeouts.
func (s *Server) NewAdminHTTPServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			defer func() {
				if v := recover(); v != nil {
					ctx.Response.Reset()
					s.fail(ctx, "", "", api.Recovered("http", v))
				}
			}()
			s.HandleAdminHTTP(ctx)
		},
		Name:                  "piccolo-admin",
		MaxRequestBodySize:    s.opts.MaxBodyBytes,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		ReadTimeout:           s.opts.BodyTimeout,
		WriteTimeout:          10 * time.Minute, // a CPU profile takes its ?seconds= to write
		IdleTimeout:           s.opts.IdleTimeout,
		Logger:                discardLogger{},
	}
}

var prefPprof = []byte("/debug/pprof/")

// HandleAdminHTTP routes one request of the admin listener:
//
//	/admin/...        the admin API (ServerOptions.Admin; 404 when off)
//	GET /metrics      Prometheus metrics (ServerOptions.Metrics)
//	/debug/pprof/NAME Go's profiles: heap, goroutine, profile, trace, ... (fasthttp's pprofhandler)
func (s *Server) HandleAdminHTTP(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	switch {
	case bytes.HasPrefix(path, prefAdmin):
		if s.opts.Admin == nil {
			writeError(ctx, gateway.Public(errNoRoute, "%v: the admin API is off: start the gateway with --admin-token or PICCOLO_ADMIN_TOKEN", errNoRoute))
			return
		}
		s.opts.Admin(ctx)
	case string(path) == "/metrics" && s.opts.Metrics != nil:
		s.opts.Metrics.Handler(ctx)
	case bytes.HasPrefix(path, prefPprof):
		pprofhandler.PprofHandler(ctx)
	default:
		writeError(ctx, gateway.Public(errNoRoute, "%v: no endpoint %s on the admin listener; endpoints: /admin/..., /metrics, /debug/pprof/", errNoRoute, strconv.Quote(string(path))))
	}
}

// recoverHTTP is HandleHTTP with a recover: a panic on a route other than
// infer (which recovers itself, with the request's id) is answered 500 with
// an id made here, counted and logged (api.Recovered), and the connection
// goes on serving.
func (s *Server) recoverHTTP(ctx *fasthttp.RequestCtx) {
	defer func() {
		if v := recover(); v != nil {
			ctx.Response.Reset()
			s.fail(ctx, "", "", api.Recovered("http", v))
		}
	}()
	s.HandleHTTP(ctx)
}

var (
	pathV2     = []byte("/v2")
	prefModels = []byte("/v2/models/")
	prefAdmin  = []byte("/admin/")
	jsonType   = []byte("application/json")
	octetType  = []byte("application/octet-stream") // a response with binary outputs
)

// HandleHTTP routes one HTTP request:
//
//	GET  /v2/health/live, /v2/health/ready, /v2 (server metadata)
//	GET  /v2/models/{session}[/versions/1], .../ready, .../stats
//	GET  /v2/models/stats (every session's statistics)
//	POST /v2/models/{session}[/versions/1]/infer
//	POST /v2/repository/index
//
// A session named "stats" is served, but GET /v2/models/stats is the
// statistics of all (as in Triton).
func (s *Server) HandleHTTP(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if s.door != nil && ctx.IsPost() && bytes.HasPrefix(path, prefModels) { // infer: the door (overload.go)
		if !s.door.enter(ctx.Time().UnixNano()) {
			if !s.stats.countShed(path) {
				s.door.unnamed.Add(1)
			}
			s.door.shedHTTP(ctx)
			return
		}
		defer func() {
			s.door.exit()
			if ctx.Response.StatusCode() == fasthttp.StatusTooManyRequests { // admission's or a tenant's refusal
				s.door.holdRepeated(ctx)
			}
		}()
	}
	switch {
	case string(path) == "/v2/models/stats":
		if _, ok := s.identifyHTTP(ctx); ok && s.method(ctx, "GET") {
			s.writeStats(ctx, "", "")
		}
	case bytes.HasPrefix(path, prefModels):
		if tn, ok := s.identifyHTTP(ctx); ok {
			s.handleModel(ctx, path[len(prefModels):], tn)
		}
	case string(path) == "/v2/repository/index":
		if _, ok := s.identifyHTTP(ctx); ok && s.method(ctx, "POST") {
			s.writeIndex(ctx)
		}
	case string(path) == "/v2/health/live":
		if s.method(ctx, "GET") {
			writeJSON(ctx, 200, `{"live":true}`)
		}
	case string(path) == "/v2/health/ready":
		if s.method(ctx, "GET") {
			if s.ready.Load() {
				writeJSON(ctx, 200, `{"ready":true}`)
			} else {
				writeJSON(ctx, 503, `{"ready":false}`)
			}
		}
	case s.opts.AdminApart && (bytes.HasPrefix(path, prefAdmin) || string(path) == "/metrics"):
		writeError(ctx, gateway.Public(errNoRoute, "%v: no endpoint %s on the client port", errNoRoute, strconv.Quote(string(path))))
	case bytes.HasPrefix(path, prefAdmin):
		if s.opts.Admin == nil {
			writeError(ctx, gateway.Public(errNoRoute, "%v: the admin API is off: start the gateway with --admin-token or PICCOLO_ADMIN_TOKEN", errNoRoute))
			return
		}
		s.opts.Admin(ctx)
	case string(path) == "/metrics" && s.opts.Metrics != nil:
		s.opts.Metrics.Handler(ctx)
	case bytes.Equal(path, pathV2):
		if s.method(ctx, "GET") {
			b := append([]byte(`{"name":"piccolo","version":`), strconv.Quote(s.opts.Version)...)
			b = append(b, `,"extensions":["`+ExtensionBinaryData+`","`+ExtensionStatistics+`"]}`...)
			ctx.SetStatusCode(200)
			ctx.SetContentTypeBytes(jsonType)
			ctx.SetBody(b)
		}
	default:
		writeError(ctx, gateway.Public(errNoRoute, "%v: no endpoint %s; endpoints: /v2, /v2/health/live, /v2/health/ready, /v2/models/{session}, /v2/models/{session}/ready, /v2/models/{session}/infer, /v2/models/{session}/stats, /v2/models/stats, /v2/repository/index",
			errNoRoute, strconv.Quote(string(path))))
	}
}

var (
	errRequestTimeout = errors.New("request timeout")
	errNoRoute        = errors.New("not found")
	errNotAllowed     = errors.New("method not allowed")
	suffixInfer       = []byte("/infer")
	suffixReady       = []byte("/ready")
	suffixStats       = []byte("/stats")
	infixVersions     = []byte("/versions/")
	errEmptySession   = gateway.BadInput("empty session name in the path: want /v2/models/{session}/...")
)

func (s *Server) method(ctx *fasthttp.RequestCtx, want string) bool {
	if string(ctx.Method()) == want || (want == "GET" && ctx.IsHead()) {
		return true
	}
	writeError(ctx, gateway.Public(errNotAllowed, "%v: %s %s; use %s", errNotAllowed, ctx.Method(), ctx.Path(), want))
	return false
}

// handleModel routes /v2/models/{session}/...; tn is the request's tenant
// (nil: tenants are off).
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, rest []byte, tn *tenants.Tenant) {
	action := ""
	switch {
	case bytes.HasSuffix(rest, suffixInfer):
		action, rest = "infer", rest[:len(rest)-len(suffixInfer)]
	case bytes.HasSuffix(rest, suffixReady):
		action, rest = "ready", rest[:len(rest)-len(suffixReady)]
	case bytes.HasSuffix(rest, suffixStats):
		action, rest = "stats", rest[:len(rest)-len(suffixStats)]
	}
	version := ""
	if i := bytes.Index(rest, infixVersions); i >= 0 {
		version, rest = string(rest[i+len(infixVersions):]), rest[:i]
		if version == "" {
			version = "/" // not a version: refused below
		}
	}
	if len(rest) == 0 || bytes.IndexByte(rest, '/') >= 0 {
		writeError(ctx, routeError(rest))
		return
	}
	if version != "" { // not in the common case: string(rest) would allocate
		if err := s.checkVersion(string(rest), version); err != nil {
			s.fail(ctx, string(rest), "", err)
			return
		}
	}
	switch action {
	case "stats":
		if s.method(ctx, "GET") {
			s.writeStats(ctx, string(rest), version)
		}
	case "infer":
		if s.method(ctx, "POST") {
			s.infer(ctx, rest, tn)
		}
	case "ready":
		if !s.method(ctx, "GET") {
			return
		}
		if err := s.exec.CheckSession(string(rest)); err != nil {
			s.fail(ctx, string(rest), "", err)
			return
		}
		if s.ready.Load() {
			writeJSON(ctx, 200, `{"ready":true}`)
		} else {
			writeJSON(ctx, 503, `{"ready":false}`)
		}
	default:
		if !s.method(ctx, "GET") {
			return
		}
		md, err := s.exec.Metadata(string(rest))
		if err != nil {
			s.fail(ctx, string(rest), "", err)
			return
		}
		ctx.SetStatusCode(200)
		ctx.SetContentTypeBytes(jsonType)
		ctx.SetBody(metadataJSON(md))
	}
}

func routeError(rest []byte) error {
	if len(rest) == 0 {
		return errEmptySession
	}
	return gateway.Public(errNoRoute, "%v: no endpoint /v2/models/%s; want /v2/models/{session}[/versions/1][/ready|/infer|/stats]", errNoRoute, rest)
}

// metadataJSON answers model metadata for a session: the first modules' inputs
// and the sinks' outputs when the runner knows them (MetadataSource), and the
// session's SLO and modules as parameters.
func metadataJSON(md gateway.SessionMetadata) []byte {
	in, out := md.Inputs, md.Outputs
	b := append([]byte(`{"name":`), strconv.Quote(md.Name)...)
	b = append(b, `,"versions":["`+SessionVersion+`"],"platform":"piccolo_session","inputs":`...)
	b = appendTensorMeta(b, in)
	b = append(b, `,"outputs":`...)
	b = appendTensorMeta(b, out)
	b = append(b, `,"parameters":{"slo_ms":`...)
	b = strconv.AppendFloat(b, float64(md.SLO)/float64(time.Millisecond), 'g', -1, 64)
	b = append(b, `,"modules":`...)
	b = appendString(b, strings.Join(md.Modules, ","))
	return append(b, "}}"...)
}

func appendTensorMeta(b []byte, ts []gateway.TensorMeta) []byte {
	b = append(b, '[')
	for i, t := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = append(b, `,"datatype":`...)
		b = appendString(b, t.Datatype)
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, "]}"...)
	}
	return append(b, ']')
}

func (s *Server) infer(ctx *fasthttp.RequestCtx, session []byte, tn *tenants.Tenant) {
	start := time.Now()
	name := string(session)
	// Not ctx itself: its Done channel is the server's. The connection's
	// context is cancelled when the client hangs up (WatchHangups).
	rctx := connContext(ctx.Conn())
	var span trace.Span
	if tracing.Enabled() {
		rctx, span = tracing.StartRequest(rctx, &ctx.Request.Header, name)
	}
	var resp gateway.InferResponse
	status := s.inferHTTP(ctx, rctx, name, tn, &resp)
	if span != nil {
		tracing.EndRequest(span, &ctx.Response.Header, status)
	}
	took := time.Since(start)
	s.opts.Metrics.Observe(name, false, status, took)
	s.stats.observe(s.exec, name, status, took, &resp)
}

// inferHTTP answers one infer request into resp and returns the status it
// answered with. rctx is the request's context (carrying its span when traced);
// tn its tenant (nil: tenants are off).
//
// A panic while it serves (decoding, the DAG, encoding) is answered 500 with
// the request's id (api.Recovered: counted, its stack logged once per cause).
func (s *Server) inferHTTP(ctx *fasthttp.RequestCtx, rctx context.Context, name string, tn *tenants.Tenant, resp *gateway.InferResponse) (status int) {
	var req gateway.InferRequest
	var ext binaryExt // the binary tensor data extension, if the request uses it
	h := hold{b: s.budget}
	ext.budget = s.budget
	defer func() {
		if v := recover(); v != nil {
			ctx.Response.Reset()
			status = s.fail(ctx, name, req.ID, api.Recovered("http", v))
		}
		h.n += ext.held
		h.release()
	}()
	if err := s.exec.CheckSession(name); err != nil {
		return s.fail(ctx, name, "", err)
	}
	if tn != nil { // before the body is decoded: a tenant over its limits costs no decoding
		if err := tn.Admit(); err != nil {
			return s.fail(ctx, name, "", err)
		}
		defer tn.Done()
	}
	// The body as received, then what it decompresses and decodes to, are
	// the request's share of the in-flight budget until it is answered.
	if err := h.take(len(ctx.PostBody())); err != nil {
		return s.fail(ctx, name, "", err)
	}
	body, err := requestBody(ctx, s.opts.MaxBodyBytes, &h)
	if err != nil {
		return s.fail(ctx, name, "", err)
	}
	if v := ctx.Request.Header.Peek(HeaderContentLength); v != nil {
		var n int
		if n, err = parseHeaderLen(v, len(body)); err == nil {
			err = decodeBinary(body, n, &req, &ext)
		}
	} else {
		err = decodeRequest(body, &req, &ext)
	}
	if err != nil {
		return s.fail(ctx, name, req.ID, err)
	}
	if v := ctx.Request.Header.Peek(HeaderTimeout); v != nil {
		if req.Timeout, err = parseTimeout(v); err != nil {
			return s.fail(ctx, name, req.ID, err)
		}
	}
	if tn != nil {
		if err := allowPriority(tn, req.Priority); err != nil {
			return s.fail(ctx, name, req.ID, err)
		}
	}
	if err := s.exec.Infer(rctx, name, &req, resp); err != nil {
		return s.fail(ctx, name, req.ID, err)
	}
	bp := s.getBuf()
	var b []byte
	headerLen := -1
	if ext.anyBinaryOutput() {
		b, headerLen, err = appendBinaryInferResponse((*bp)[:0], resp, &ext)
	} else {
		b, err = AppendInferResponse((*bp)[:0], resp)
	}
	if err != nil {
		s.putBuf(bp)
		return s.fail(ctx, name, req.ID, err)
	}
	ctx.SetStatusCode(200)
	if headerLen >= 0 {
		var num [20]byte
		ctx.Response.Header.SetBytesV(HeaderContentLength, strconv.AppendInt(num[:0], int64(headerLen), 10))
		ctx.SetContentTypeBytes(octetType)
	} else {
		ctx.SetContentTypeBytes(jsonType)
	}
	ctx.SetBody(b)
	*bp = b
	s.putBuf(bp)
	return 200
}

// writeStats answers GET /v2/models[/{session}[/versions/{v}]]/stats.
func (s *Server) writeStats(ctx *fasthttp.RequestCtx, session, version string) {
	r, err := s.modelStatistics(session, version)
	if err != nil {
		s.fail(ctx, session, "", err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentTypeBytes(jsonType)
	ctx.SetBody(appendStatsJSON(make([]byte, 0, 512), r))
}

// writeIndex answers POST /v2/repository/index: its optional body is
// {"ready": true|false}.
func (s *Server) writeIndex(ctx *fasthttp.RequestCtx) {
	readyOnly, err := decodeIndexRequest(ctx.PostBody())
	if err != nil {
		s.fail(ctx, "", "", err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentTypeBytes(jsonType)
	ctx.SetBody(appendIndexJSON(make([]byte, 0, 256), s.repositoryIndex(readyOnly)))
}

func (s *Server) getBuf() *[]byte {
	if bp, ok := s.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (s *Server) putBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 { // do not pin huge buffers
		s.bufs.Put(bp)
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(jsonType)
	ctx.SetBodyString(body)
}

// fail answers a failed request to session: the status HTTPStatus maps err
// to and {"error": "<publicMessage> (request id <id>)"} (the spec's error
// object has the one key); it logs err's whole chain under that id
// (logFailure) and returns the status.
func (s *Server) fail(ctx *fasthttp.RequestCtx, session, id string, err error) int {
	id = s.requestID(id)
	s.logFailure(session, id, err)
	return writeErrorMessage(ctx, err, s.publicMessage(err, session)+" (request id "+id+")")
}

// writeError answers {"error": "..."} with the status HTTPStatus maps err to,
// and returns that status: for the errors of routes and of the HTTP layer,
// made with gateway.Public or BadInput (anything else is answered with its
// status's text only).
func writeError(ctx *fasthttp.RequestCtx, err error) int {
	msg, ok := gateway.PublicMessage(err)
	if !ok {
		msg = strings.ToLower(fasthttp.StatusMessage(HTTPStatus(err)))
	}
	return writeErrorMessage(ctx, err, msg)
}

// writeErrorMessage answers {"error": msg} with the status err maps to.
func writeErrorMessage(ctx *fasthttp.RequestCtx, err error, msg string) int {
	status := HTTPStatus(err)
	switch {
	case errors.Is(err, errNoRoute):
		status = fasthttp.StatusNotFound
	case errors.Is(err, errNotAllowed):
		status = fasthttp.StatusMethodNotAllowed
	case errors.Is(err, errUnsupportedEncoding):
		status = fasthttp.StatusUnsupportedMediaType
	case errors.Is(err, errRequestTimeout):
		status = fasthttp.StatusRequestTimeout
		ctx.SetConnectionClose()
	}
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(jsonType)
	if !refusalHeaders(ctx, err) && (status == fasthttp.StatusTooManyRequests || errors.Is(err, errBusy)) {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	b := append(make([]byte, 0, 128), `{"error":`...)
	b = appendString(b, msg)
	ctx.SetBody(append(b, '}'))
	return status
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// logFailure logs a failed infer request with its session and request id (not on
// the success path, so never per request in steady state).
func (s *Server) logFailure(session, requestID string, err error) {
	if s.opts.Logger == nil {
		return
	}
	status := HTTPStatus(err)
	level := zap.DebugLevel
	if status >= 500 {
		level = zap.WarnLevel
	}
	if ce := s.opts.Logger.Check(level, "request failed"); ce != nil {
		ce.Write(zap.String("session", session), zap.String("request_id", requestID), zap.Int("status", status), zap.Error(err))
	}
}

// reportPanic is the process's panic reporter (api.ReportPanics): it counts
// each recovered panic in m and logs it at error, with its stack the first
// time its cause is seen. The request it failed is logged under its id by
// logFailure.
func reportPanic(m *metrics.Metrics, log *zap.Logger) api.PanicReporter {
	return func(where, cause string, stack []byte) {
		m.Panic(where)
		if log == nil {
			return
		}
		if stack != nil {
			log.Error("panic recovered", zap.String("where", where), zap.String("cause", cause), zap.ByteString("stack", stack))
			return
		}
		log.Error("panic recovered (stack logged at its first occurrence)", zap.String("where", where), zap.String("cause", cause))
	}
}
