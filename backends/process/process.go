package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/tlsfiles"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/tracing"
)

// Options are `piccolo backend`'s settings, one field per flag (named in the
// comments); Run checks them.
type Options struct {
	Listen   string   // --listen: gRPC host:port (port 0: any free port)
	Hardware string   // --hardware: the hardware type ("": named from the first GPU)
	Files    []string // -c: config files with the hardware's profiles (merged)
	Executor string   // --executor: a name in Executors
	Jitter   float64  // --jitter (sim): batch durations vary by ±this fraction, in [0,1)
	Seed     uint64   // --seed (sim): jitter seed
	// SimOutputBytes (--sim-output-bytes, sim): model → bytes of each of its
	// output rows (sim.Options.OutputWidth, rounded up to FP32 values).
	SimOutputBytes map[string]int
	// HoldBytes and HoldTTL (--hold-mib, --hold-ttl) bound the outputs kept
	// for gateways (backends.ServerOptions; docs/locality.md).
	HoldBytes int64
	HoldTTL   time.Duration
	Models    []string      // --models: loaded at start with their largest profiled entry
	Drain     time.Duration // --drain: how long batches in flight may finish on shutdown
	// MetricsListen (--metrics-listen) is where /metrics is served:
	// host:port, "auto" (the gRPC port + MetricsPortOffset) or off/"": none.
	MetricsListen  string
	GPUTelemetry   bool     // --gpu-telemetry: read the GPUs with NVML
	ORTLib         string   // --ort-lib (onnx, ocr): path of libonnxruntime.so.1
	ModelDir       string   // --model-dir (onnx, builtin, ocr): <model>.onnx and ppocr_keys_v1.txt
	IntraOpThreads int      // --intra-op-threads (onnx, ocr): threads per lane, ≥ 1
	DeviceLanes    int      // --device-lanes (onnx, ocr): batches at once across models (0: no limit)
	Consul         string   // --consul: the Consul agent to register with; "": none
	ID             string   // --id: the Consul registration id ("": <hardware>-<host>-<port>)
	Faults         []string // --fault: faults to inject (docs/faults.md)
	FaultSeed      uint64   // --fault-seed: seed of the fail share's draws
	// FaultInjection (--fault-injection) allows faults at all: --fault and
	// /admin/faults on the metrics port. Off by default: a backend without
	// it refuses --fault and does not serve /admin/faults (404), so nobody
	// who reaches it can make it hang, slow down or fail; with it the
	// backend says so at warn level when it starts (docs/security.md).
	FaultInjection bool
	// AdminToken (--admin-token, $PICCOLO_BACKEND_TOKEN) is the gateway's
	// credential: with one, model load and unload (gRPC) and /admin/faults
	// need "authorization: Bearer <token>" (backends.RequireToken); "": no
	// credential asked (a warning at start).
	AdminToken string
	// ConsulAuth is the ACL token and TLS towards Consul (--consul-token,
	// --consul-cacert, ...; the CONSUL_* environment for what is not given).
	// With AdminToken the registration also carries its credential
	// (membership.Credential), which gateways with that --backend-token ask.
	ConsulAuth membership.ConsulAuth
	// TLS is the gRPC listener's TLS (--tls-cert, --tls-key,
	// --tls-client-ca); nil: plain text.
	TLS *tls.Config
	// Tracing is --otlp-endpoint, --otlp-insecure and --trace-sampling (its
	// Service is set here).
	Tracing tracing.Options
	// NewLogger makes the process's logger (--log); nil: zap.NewProduction.
	NewLogger func() (*zap.Logger, error)
	// Version is what the server reports in ServerMetadata.
	Version string
	// Executors are the kinds Executor is looked up in (nil:
	// BuiltinExecutors()).
	Executors *ExecutorRegistry
}

// Run serves a backend as o says until ctx ends, then reports not ready,
// deregisters from Consul, finishes the batches in flight (up to o.Drain) and
// returns nil. ready, when set, is called with the bound gRPC address once the
// backend accepts connections (and is registered). Errors, each naming its
// flag: no config for the sim executor, an unknown executor, --id without
// --consul, a hardware type not in the config's catalog (or none given and no
// GPU to name it), an executor that cannot be built, a --models entry it does
// not serve, a listener that cannot bind, a bad --fault, a failed Consul
// registration, or the gRPC server failing.
func Run(ctx context.Context, o Options, ready func(addr string)) error {
	tel, gpuErr := openGPU(o.GPUTelemetry)
	if tel != nil {
		defer tel.Close()
	}
	if len(o.Files) == 0 && o.Executor == "sim" {
		return errors.New("no config given: pass -c FILE (repeatable) with the profiles of the hardware")
	}
	kinds := o.Executors
	if kinds == nil {
		kinds = BuiltinExecutors()
	}
	kind, err := kinds.Lookup(o.Executor)
	if err != nil {
		return fmt.Errorf("--executor: %w", err)
	}
	if o.ID != "" && o.Consul == "" {
		return errors.New("--id is only used with --consul: it names the Consul registration")
	}
	cfg := &api.Config{}
	if len(o.Files) > 0 {
		var err error
		if cfg, err = api.Load(o.Files...); err != nil {
			return err
		}
	}
	if o.Hardware == "" {
		var err error
		if o.Hardware, err = hardwareFromGPU(tel, gpuErr, cfg); err != nil {
			return err
		}
	}
	if len(cfg.Hardware) > 0 {
		if _, ok := cfg.HardwareByName(o.Hardware); !ok {
			names := make([]string, len(cfg.Hardware))
			for i, h := range cfg.Hardware {
				names[i] = h.Name
			}
			return fmt.Errorf("--hardware %q is not in the config's hardware catalog: %s", o.Hardware, strings.Join(names, ", "))
		}
	}
	exec, err := kind.Build(o, cfg)
	if err != nil {
		return err
	}
	reg := metrics.ProcessRegistry()
	o.Tracing.Service = "piccolo-backend"
	log, stop, err := tracing.StartProcess(ctx, o.Tracing, o.NewLogger)
	if err != nil {
		return err
	}
	defer stop()
	bm, err := backends.NewMetrics(reg)
	if err != nil {
		return err
	}
	if tel != nil {
		reg.MustRegister(tel)
		for _, d := range tel.Devices() {
			log.Info("GPU", zap.Int("index", d.Index), zap.String("name", d.Name), zap.Uint64("memory_bytes", d.MemoryBytes))
		}
	} else if o.GPUTelemetry {
		log.Info("no GPU telemetry", zap.Error(gpuErr))
	}
	if len(o.Faults) > 0 && !o.FaultInjection {
		return fmt.Errorf("--fault %s: fault injection is off; start the backend with --fault-injection to rehearse failures (never in production)", strings.Join(o.Faults, ","))
	}
	inj, initialFaults, err := newFaults(o, log, reg)
	if err != nil {
		return err
	}
	faultsAPI := map[string]http.HandlerFunc{}
	if o.FaultInjection {
		faultsAPI[FaultsPath] = backends.RequireTokenHTTP(o.AdminToken, inj.Handler().ServeHTTP)
		log.Warn("FAULT INJECTION ON: this backend misbehaves on purpose when told to (--fault, "+FaultsPath+" on the metrics port, no credential); never in production",
			zap.Strings("faults", o.Faults))
	}
	exec = inj.Executor(exec)
	srv, err := backends.NewServer(exec, backends.ServerOptions{Version: o.Version, Logger: log, Metrics: bm, HoldBytes: o.HoldBytes, HoldTTL: o.HoldTTL})
	if err != nil {
		return err
	}
	for _, m := range o.Models {
		if _, err := srv.Load(strings.TrimSpace(m), 0, 0); err != nil {
			return fmt.Errorf("--models: %w", err)
		}
	}
	lis, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.Listen, err)
	}
	lis = inj.Listener(lis)
	if err := inj.Set(initialFaults); err != nil {
		lis.Close()
		return fmt.Errorf("--fault: %w", err)
	}
	maddr, err := MetricsAddr(o.MetricsListen, lis.Addr().String())
	if err != nil {
		lis.Close()
		return err
	}
	if maddr != "" {
		mlis, err := net.Listen("tcp", maddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("--metrics-listen %s (%s): %w", o.MetricsListen, maddr, err)
		}
		defer metrics.Serve(mlis, reg, faultsAPI).Close()
		log.Info("metrics serving", zap.String("address", mlis.Addr().String()))
	}
	gopts := append(append(tlsfiles.GRPCCreds(o.TLS), tracing.ServerOptions()...), inj.ServerOption())
	if so := backends.RequireToken(o.AdminToken); so != nil {
		gopts = append(gopts, so)
	} else {
		log.Warn("no admin token: anyone who reaches this backend may load and unload its models; pass --admin-token or set PICCOLO_BACKEND_TOKEN (docs/security.md)")
	}
	g := backends.NewGRPCServer(srv, gopts...)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	addr := lis.Addr().String()
	log.Info("backend serving", zap.String("address", addr), zap.String("hardware", o.Hardware),
		zap.String("executor", o.Executor), zap.Strings("models", exec.Models()))
	deregister, err := register(ctx, o, Member(o, cfg, tel, exec.Models(), addr), log)
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
	log.Info("backend draining", zap.Duration("drain", o.Drain))
	srv.Drain()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.Drain):
		g.Stop()
		log.Warn("drain timed out; batches in flight were cut off")
	}
	log.Info("backend stopped")
	return nil
}
