package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/backends/process"
)

// backendOptions are the flags of `piccolo backend`.
type backendOptions struct {
	tracing    tracingFlags
	listen     string
	hardware   string
	files      []string
	executor   string
	jitter     float64
	holdMiB    int64
	holdTTL    time.Duration
	simOutput  map[string]int
	seed       uint64
	models     []string
	logFmt     string
	drain      time.Duration
	metrics    string // listen address of /metrics: host:port, auto (gRPC port + 1000) or off/empty: none
	gpu        bool   // read GPU telemetry with NVML
	ortLib     string // onnx, ocr: path of libonnxruntime.so.1
	modelDir   string // onnx, ocr: directory of <model>.onnx (and ppocr_keys_v1.txt)
	threads    int    // onnx, ocr: intra-op threads per lane
	devLanes   int    // onnx, ocr: batches at once across models (0: no limit)
	consul     string // Consul agent HTTP address to register with; "": none
	consulAuth membership.ConsulAuth
	id         string // Consul registration id; "": <hardware>-<host>-<port>

	faults    []string // --fault words (docs/faults.md)
	faultSeed uint64   // seed of the fail share's draws
	faultOn   bool     // --fault-injection: allow --fault and /admin/faults
	token     string   // --admin-token: the gateway's credential ("": $PICCOLO_BACKEND_TOKEN)
	tls       tlsFlags // --tls-cert, --tls-key, --tls-client-ca of the gRPC listener
}

func newBackendCmd() *cobra.Command {
	o := &backendOptions{}
	cmd := &cobra.Command{
		Use:   "backend --hardware TYPE -c FILE... [--listen ADDR]",
		Short: "Serve models on one (emulated) machine over KServe v2 gRPC",
		Long: `backend serves the KServe v2 gRPC protocol (inference.GRPCInferenceService, the
same as Triton's) for one machine of the given hardware type. The gateway sends it
whole batches, stacked on dimension 0.

Executor sim emulates the hardware from its profiles in the config: a batch of n
items takes the profiled duration linear between the profiled batches around n
at the loaded concurrency (times a seeded jitter factor in [1-J, 1+J] with --jitter J);
at most "concurrency" batches of a model run at once. Its models answer output0
FP32 [n, 1], a checksum of each input row.

Executor onnx runs the ONNX models of --model-dir (<model>.onnx) with ONNX
Runtime (--ort-lib) on --intra-op-threads threads per lane; the OCR models at
their padded shapes (ocr-det 3×640×640, ocr-cls 3×48×192, ocr-rec 3×48×320),
passing through inputs they do not consume. Executor builtin runs the Go OCR
steps (ocr-pre, ocr-boxes, ocr-rotate, ocr-ctc; the dictionary is
--model-dir/ppocr_keys_v1.txt). Executor ocr serves both from one process, and
fused chains of them, one model named by its steps joined with "+" (e.g.
ocr-pre+ocr-det: docs/fusion.md). They
need no config; ` + "`make models`" + ` fetches the files to the default paths.

Models start unloaded unless listed in --models (loaded with their largest
profiled entry). RepositoryModelLoad takes the parameters "batch" and
"concurrency" (int64_param or decimal string_param). Prometheus metrics are
served at /metrics on --metrics-listen (default: the gRPC port + 1000; "off" for
none): batches, items, errors, batch seconds, loaded settings, by model, and,
with a GPU, piccolo_gpu_* (name, memory, utilisation, power, from NVML). Without
--hardware the hardware type is named from the GPU. On SIGINT or SIGTERM the
backend reports not ready, finishes the batches in flight (up to --drain) and exits.

It also serves the gRPC health service (grpc.health.v1; services "" and
inference.GRPCInferenceService): SERVING once its --models are loaded and it
accepts, NOT_SERVING from the start of the drain; and gRPC server reflection, so
that grpcurl -plaintext ADDR list (or describe) needs no .proto file.

With --consul ADDR it registers with that Consul agent as service piccolo-backend
(id --id, else <hardware>-<host>-<port>; meta: hardware, price from the catalog,
GPU name and memory from NVML, models) with a TCP check of its gRPC port every
second, so gateways see it join, and drop it within about a second of dying. It
re-registers if the agent restarts, and deregisters on SIGINT or SIGTERM before
draining.

With --fault-injection and --fault it misbehaves on purpose, to rehearse failures: refuse (connections
refused), reset (calls cut), hang, slow=K (batches K times as long; with slowshare=P only
a share P of them, drawn per batch), fail=P (a
share P of calls answer INTERNAL), malformed (outputs of the wrong shape or
size), shared=K (batches K times as long while another model runs batches there). GET/PUT/DELETE ` + process.FaultsPath + ` on the metrics port reads and changes them
at run time (JSON); piccolo_backend_fault{kind} shows them. See docs/faults.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runBackend(ctx, o, func(addr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "piccolo backend: %s executor, hardware %s, serving on %s\n", o.executor, o.hardware, addr)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:9101", "gRPC listen address host:port (port 0: any free port)")
	f.StringVar(&o.hardware, "hardware", "", "hardware type this backend is, e.g. v100 (default: named from the first GPU's name; required without a GPU)")
	f.StringArrayVarP(&o.files, "config", "c", nil, "config file with the hardware's profiles (repeatable; files are merged)")
	f.StringVar(&o.executor, "executor", "sim", "executor: "+process.ExecutorNames()+" (ocr: builtin and onnx in one process)")
	f.StringVar(&o.ortLib, "ort-lib", onnx.DefaultLibrary(), "onnx, ocr: ONNX Runtime shared library (make models fetches it)")
	f.StringVar(&o.modelDir, "model-dir", onnx.DefaultModelDir(), "onnx, builtin, ocr: directory of <model>.onnx and ppocr_keys_v1.txt")
	f.IntVar(&o.threads, "intra-op-threads", 1, "onnx, ocr: ONNX Runtime threads per lane (cpu-2t: 2)")
	f.IntVar(&o.devLanes, "device-lanes", 0, "onnx, ocr: at most this many batches run at once across all models, so the backend keeps at most device-lanes × intra-op-threads cores busy, as its profiles assume (0: no limit beyond each model's lanes)")
	f.Float64Var(&o.jitter, "jitter", 0, "sim: batch durations vary uniformly by ±this fraction, in [0,1)")
	f.Uint64Var(&o.seed, "seed", 1, "sim: jitter seed")
	f.StringToIntVar(&o.simOutput, "sim-output-bytes", nil, "sim: model=BYTES makes each output row of that model BYTES long (rounded up to 4-byte FP32 values), to stand for a model with large intermediates (comma-separated or repeated)")
	f.Int64Var(&o.holdMiB, "hold-mib", 256, "keep up to this many MiB of outputs a gateway asks this backend to hold, so a later call names them instead of sending them again (docs/locality.md); 0: keep none")
	f.DurationVar(&o.holdTTL, "hold-ttl", backends.DefaultHoldTTL, "how long each held output is kept")
	f.StringSliceVar(&o.models, "models", nil, "models to load at start, comma-separated (default: none; wait for RepositoryModelLoad)")
	f.StringVar(&o.logFmt, "log", logFormats.Names()[0], logFlagHelp)
	addTracingFlags(f, &o.tracing)
	f.StringVar(&o.metrics, "metrics-listen", "auto", "serve Prometheus /metrics on this host:port; auto: the --listen host at its port + 1000 (9101 → 10101); off: none")
	f.BoolVar(&o.gpu, "gpu-telemetry", true, "read the GPUs with NVML: metrics piccolo_gpu_*, and the hardware type when --hardware is not given")
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on shutdown, how long to let batches in flight finish")
	f.StringVar(&o.consul, "consul", "", "register with the Consul agent at this host:port (HTTP API) as service "+membership.ServiceName+" (meta: hardware, price, GPU, models; TCP check every 1s); deregister on shutdown")
	f.StringVar(&o.id, "id", "", "with --consul: the registration id (default <hardware>-<host>-<port>)")
	addConsulAuthFlags(f, &o.consulAuth)
	f.StringSliceVar(&o.faults, "fault", nil, "inject faults (docs/faults.md), comma-separated or repeated: refuse, reset, hang, slow=K, fail=P, malformed, shared=K; change at run time with "+process.FaultsPath+" on the metrics port")
	f.Uint64Var(&o.faultSeed, "fault-seed", 1, "seed of which calls fail=P fails and which batches slowshare=P slows")
	f.StringVar(&o.token, "admin-token", "", "the gateway's credential: model load/unload and "+process.FaultsPath+" need Authorization: Bearer <token>; with --consul the registration carries its HMAC, which gateways with this --backend-token ask (default: $"+backendTokenEnv+"; empty: none asked, a warning at start)")
	f.BoolVar(&o.faultOn, "fault-injection", false, "allow fault injection: --fault and "+process.FaultsPath+" on the metrics port (off: --fault is refused and "+process.FaultsPath+" is 404; on: logged at warn; never in production)")
	o.tls.register(f, "serve gRPC")
	return cmd
}

// runBackend serves until ctx ends, then drains (process.Run). ready is
// called with the bound address once the backend accepts connections.
func runBackend(ctx context.Context, o *backendOptions, ready func(addr string)) error {
	tlsCfg, err := o.tls.config()
	if err != nil {
		return err
	}
	return process.Run(ctx, process.Options{Listen: o.listen, Hardware: o.hardware, Files: o.files, Executor: o.executor, Jitter: o.jitter,
		Seed: o.seed, Models: o.models, Drain: o.drain, MetricsListen: o.metrics, GPUTelemetry: o.gpu, ORTLib: o.ortLib, ModelDir: o.modelDir,
		IntraOpThreads: o.threads, DeviceLanes: o.devLanes, Consul: o.consul, ID: o.id, Faults: o.faults, FaultSeed: o.faultSeed, FaultInjection: o.faultOn, AdminToken: backendToken(o.token),
		ConsulAuth: o.consulAuth, HoldBytes: o.holdMiB << 20, HoldTTL: o.holdTTL, SimOutputBytes: o.simOutput,
		TLS: tlsCfg, Tracing: o.tracing.options(), NewLogger: newLogger(o.logFmt), Version: version}, ready)
}

// modelCache is where `make models` fetches into (onnx.Cache).
var modelCache = onnx.Cache

// backendTokenEnv is where the backend's admin token and the gateway's
// --backend-token are read from when their flags are empty.
const backendTokenEnv = "PICCOLO_BACKEND_TOKEN"

// backendToken is flag, else $PICCOLO_BACKEND_TOKEN.
func backendToken(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(backendTokenEnv)
}
