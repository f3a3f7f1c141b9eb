package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/fused"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/tracing"
)

// backendOptions are the flags of `piccolo backend`.
type backendOptions struct {
	tracing  tracingFlags
	listen   string
	hardware string
	files    []string
	executor string
	jitter   float64
	seed     uint64
	models   []string
	logFmt   string
	drain    time.Duration
	metrics  string // listen address of /metrics: host:port, auto (gRPC port + 1000) or off/empty: none
	gpu      bool   // read GPU telemetry with NVML
	ortLib   string // onnx, ocr: path of libonnxruntime.so.1
	modelDir string // onnx, ocr: directory of <model>.onnx (and ppocr_keys_v1.txt)
	threads  int    // onnx, ocr: intra-op threads per lane
	devLanes int    // onnx, ocr: batches at once across models (0: no limit)
	consul   string // Consul agent HTTP address to register with; "": none (backend_consul.go)
	id       string // Consul registration id; "": <hardware>-<host>-<port>

	faults    []string // --fault words (backend_faults.go)
	faultSeed uint64   // seed of the fail share's draws
	tls       tlsFlags // --tls-cert, --tls-key, --tls-client-ca of the gRPC listener
}

// backendExecutors builds an executor by name. Registered by hand: the whole set is here.
var backendExecutors = map[string]func(o *backendOptions, cfg *api.Config) (backends.Executor, error){
	"sim": func(o *backendOptions, cfg *api.Config) (backends.Executor, error) {
		return sim.New(o.hardware, cfg.Profiles, sim.Options{Jitter: o.jitter, Seed: o.seed})
	},
	"onnx": func(o *backendOptions, _ *api.Config) (backends.Executor, error) { return newONNXExecutor(o) },
	"builtin": func(o *backendOptions, _ *api.Config) (backends.Executor, error) {
		return builtin.New(builtin.Options{Dictionary: filepath.Join(o.modelDir, "ppocr_keys_v1.txt")})
	},
	// ocr: the OCR session's Go processing modules and ONNX models in one process,
	// and fused chains of them (docs/fusion.md).
	"ocr": func(o *backendOptions, _ *api.Config) (backends.Executor, error) {
		b, err := builtin.New(builtin.Options{Dictionary: filepath.Join(o.modelDir, "ppocr_keys_v1.txt")})
		if err != nil {
			return nil, err
		}
		x, err := newONNXExecutor(o)
		if err != nil {
			return nil, err
		}
		u, err := backends.NewUnion(b, x)
		if err != nil {
			return nil, err
		}
		return fused.New(u, fused.OCRChains()...)
	},
}

// modelCache is where `make models` (scripts/fetch-models.sh) fetches into, as
// internal/ocrtest.Cache finds it: $PICCOLO_CACHE, else
// $XDG_CACHE_HOME/piccolo, else ~/.cache/piccolo.
func modelCache() string {
	if d := os.Getenv("PICCOLO_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "piccolo")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "piccolo")
}

// newONNXExecutor runs the models of --model-dir, the OCR models at the fixed
// shapes the builtin OCR steps pad to (backends/onnx/doc.go: padding, not buckets).
func newONNXExecutor(o *backendOptions) (*onnx.Executor, error) {
	if o.threads < 1 {
		return nil, fmt.Errorf("--intra-op-threads %d: want ≥ 1", o.threads)
	}
	ocr := builtin.DefaultOCR()
	return onnx.New(onnx.Options{
		Library: o.ortLib, ModelDir: o.modelDir, IntraOpThreads: o.threads, DeviceLanes: o.devLanes, PassThrough: true,
		Shapes: ocr.ONNXShapes(), Resized: resizedOf(ocr.ONNXVariants()),
	})
}

// resizedOf turns the OCR variants into the onnx executor's Resized models.
func resizedOf(vs map[string]builtin.ONNXVariant) map[string]onnx.Resized {
	out := make(map[string]onnx.Resized, len(vs))
	for name, v := range vs {
		out[name] = onnx.Resized(v)
	}
	return out
}

func backendExecutorNames() string {
	names := make([]string, 0, len(backendExecutors))
	for n := range backendExecutors {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
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
items takes the profiled duration of the smallest profiled batch ≥ n at the
loaded concurrency (times a seeded jitter factor in [1-J, 1+J] with --jitter J);
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

With --fault it misbehaves on purpose, to rehearse failures: refuse (connections
refused), reset (calls cut), hang, slow=K (batches K times as long), fail=P (a
share P of calls answer INTERNAL), malformed (outputs of the wrong shape or
size), shared=K (batches K times as long while another model runs batches there). GET/PUT/DELETE ` + faultsPath + ` on the metrics port reads and changes them
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
	f.StringVar(&o.executor, "executor", "sim", "executor: "+backendExecutorNames()+" (ocr: builtin and onnx in one process)")
	f.StringVar(&o.ortLib, "ort-lib", filepath.Join(modelCache(), "onnxruntime-1.30.0", "libonnxruntime.so.1"), "onnx, ocr: ONNX Runtime shared library (make models fetches it)")
	f.StringVar(&o.modelDir, "model-dir", filepath.Join(modelCache(), "ocr-models-1.4.2"), "onnx, builtin, ocr: directory of <model>.onnx and ppocr_keys_v1.txt")
	f.IntVar(&o.threads, "intra-op-threads", 1, "onnx, ocr: ONNX Runtime threads per lane (cpu-2t: 2)")
	f.IntVar(&o.devLanes, "device-lanes", 0, "onnx, ocr: at most this many batches run at once across all models, so the backend keeps at most device-lanes × intra-op-threads cores busy, as its profiles assume (0: no limit beyond each model's lanes)")
	f.Float64Var(&o.jitter, "jitter", 0, "sim: batch durations vary uniformly by ±this fraction, in [0,1)")
	f.Uint64Var(&o.seed, "seed", 1, "sim: jitter seed")
	f.StringSliceVar(&o.models, "models", nil, "models to load at start, comma-separated (default: none; wait for RepositoryModelLoad)")
	f.StringVar(&o.logFmt, "log", logFormats.Names()[0], logFlagHelp)
	addTracingFlags(f, &o.tracing)
	f.StringVar(&o.metrics, "metrics-listen", "auto", "serve Prometheus /metrics on this host:port; auto: the --listen host at its port + 1000 (9101 → 10101); off: none")
	f.BoolVar(&o.gpu, "gpu-telemetry", true, "read the GPUs with NVML: metrics piccolo_gpu_*, and the hardware type when --hardware is not given")
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on shutdown, how long to let batches in flight finish")
	f.StringVar(&o.consul, "consul", "", "register with the Consul agent at this host:port (HTTP API) as service "+membership.ServiceName+" (meta: hardware, price, GPU, models; TCP check every 1s); deregister on shutdown")
	f.StringVar(&o.id, "id", "", "with --consul: the registration id (default <hardware>-<host>-<port>)")
	f.StringSliceVar(&o.faults, "fault", nil, "inject faults (docs/faults.md), comma-separated or repeated: refuse, reset, hang, slow=K, fail=P, malformed, shared=K; change at run time with "+faultsPath+" on the metrics port")
	f.Uint64Var(&o.faultSeed, "fault-seed", 1, "seed of which calls fail=P fails")
	o.tls.register(f, "serve gRPC")
	return cmd
}

// runBackend serves until ctx ends, then drains. ready is called with the bound
// address once the backend accepts connections.
func runBackend(ctx context.Context, o *backendOptions, ready func(addr string)) error {
	tel, gpuErr := openBackendGPU(o.gpu)
	if tel != nil {
		defer tel.Close()
	}
	if len(o.files) == 0 && o.executor == "sim" {
		return errors.New("no config given: pass -c FILE (repeatable) with the profiles of the hardware")
	}
	build, ok := backendExecutors[o.executor]
	if !ok {
		return fmt.Errorf("--executor %q: allowed: %s", o.executor, backendExecutorNames())
	}
	logFmt, err := parseLogFormat(o.logFmt)
	if err != nil {
		return err
	}
	if err := checkConsulFlags(o); err != nil {
		return err
	}
	cfg := &api.Config{}
	if len(o.files) > 0 {
		var err error
		if cfg, err = api.Load(o.files...); err != nil {
			return err
		}
	}
	if o.hardware == "" {
		var err error
		if o.hardware, err = hardwareFromGPU(tel, gpuErr, cfg); err != nil {
			return err
		}
	}
	if len(cfg.Hardware) > 0 {
		if _, ok := cfg.HardwareByName(o.hardware); !ok {
			names := make([]string, len(cfg.Hardware))
			for i, h := range cfg.Hardware {
				names[i] = h.Name
			}
			return fmt.Errorf("--hardware %q is not in the config's hardware catalog: %s", o.hardware, strings.Join(names, ", "))
		}
	}
	exec, err := build(o, cfg)
	if err != nil {
		return err
	}
	log, err := logFmt.New()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	stopTracing, err := startTracing(ctx, o.tracing, "piccolo-backend", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := processRegistry()
	metrics, err := backends.NewMetrics(reg)
	if err != nil {
		return err
	}
	if tel != nil {
		reg.MustRegister(tel)
		for _, d := range tel.Devices() {
			log.Info("GPU", zap.Int("index", d.Index), zap.String("name", d.Name), zap.Uint64("memory_bytes", d.MemoryBytes))
		}
	} else if o.gpu {
		log.Info("no GPU telemetry", zap.Error(gpuErr))
	}
	inj, initialFaults, err := newBackendFaults(o, log, reg)
	if err != nil {
		return err
	}
	exec = inj.Executor(exec)
	srv, err := backends.NewServer(exec, backends.ServerOptions{Version: version, Logger: log, Metrics: metrics})
	if err != nil {
		return err
	}
	for _, m := range o.models {
		if _, err := srv.Load(strings.TrimSpace(m), 0, 0); err != nil {
			return fmt.Errorf("--models: %w", err)
		}
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	lis = inj.Listener(lis)
	if err := inj.Set(initialFaults); err != nil {
		lis.Close()
		return fmt.Errorf("--fault: %w", err)
	}
	maddr, err := backendMetricsAddr(o.metrics, lis.Addr().String())
	if err != nil {
		lis.Close()
		return err
	}
	if maddr != "" {
		mlis, err := net.Listen("tcp", maddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("--metrics-listen %s (%s): %w", o.metrics, maddr, err)
		}
		defer serveMetrics(mlis, reg, map[string]http.HandlerFunc{faultsPath: inj.Handler().ServeHTTP}).Close()
		log.Info("metrics serving", zap.String("address", mlis.Addr().String()))
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		lis.Close()
		return err
	}
	g := backends.NewGRPCServer(srv, append(append(grpcCreds(tlsCfg), tracing.ServerOptions()...), inj.ServerOption())...)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	addr := lis.Addr().String()
	log.Info("backend serving", zap.String("address", addr), zap.String("hardware", o.hardware),
		zap.String("executor", o.executor), zap.Strings("models", exec.Models()))
	deregister, err := registerBackend(ctx, o, backendMember(o, cfg, tel, exec.Models(), addr), log)
	if err != nil {
		g.Stop()
		return err
	}
	srv.Serve() // gRPC health: SERVING
	if ready != nil {
		ready(addr)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	deregister() // gateways stop sending before the drain
	log.Info("backend draining", zap.Duration("drain", o.drain))
	srv.Drain()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.drain):
		g.Stop()
		log.Warn("drain timed out; batches in flight were cut off")
	}
	log.Info("backend stopped")
	return nil
}
