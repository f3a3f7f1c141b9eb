package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// backendOptions are the flags of `piccolo backend`.
type backendOptions struct {
	listen   string
	hardware string
	files    []string
	executor string
	jitter   float64
	seed     uint64
	models   []string
	logFmt   string
	drain    time.Duration
	metrics  string // listen address of /metrics; empty: none
}

// backendExecutors builds an executor by name. Registered by hand: the whole set is here.
var backendExecutors = map[string]func(o *backendOptions, cfg *api.Config) (backends.Executor, error){
	"sim": func(o *backendOptions, cfg *api.Config) (backends.Executor, error) {
		return sim.New(o.hardware, cfg.Profiles, sim.Options{Jitter: o.jitter, Seed: o.seed})
	},
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

Models start unloaded unless listed in --models (loaded with their largest
profiled entry). RepositoryModelLoad takes the parameters "batch" and
"concurrency" (int64_param or decimal string_param). With --metrics-listen,
Prometheus metrics are served at /metrics (batches, items, errors, batch
seconds, loaded settings, by model). On SIGINT or SIGTERM the
backend reports not ready, finishes the batches in flight (up to --drain) and exits.`,
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
	f.StringVar(&o.hardware, "hardware", "", "hardware type this backend is (required), e.g. v100")
	f.StringArrayVarP(&o.files, "config", "c", nil, "config file with the hardware's profiles (repeatable; files are merged)")
	f.StringVar(&o.executor, "executor", "sim", "executor: "+backendExecutorNames())
	f.Float64Var(&o.jitter, "jitter", 0, "sim: multiplicative jitter J of batch durations, 0 ≤ J < 1")
	f.Uint64Var(&o.seed, "seed", 1, "sim: jitter seed")
	f.StringSliceVar(&o.models, "models", nil, "models to load at start, comma-separated (default: none; wait for RepositoryModelLoad)")
	f.StringVar(&o.logFmt, "log", "json", "log format: json or console")
	f.StringVar(&o.metrics, "metrics-listen", "", "serve Prometheus /metrics on this host:port (default: off)")
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on shutdown, how long to let batches in flight finish")
	return cmd
}

// runBackend serves until ctx ends, then drains. ready is called with the bound
// address once the backend accepts connections.
func runBackend(ctx context.Context, o *backendOptions, ready func(addr string)) error {
	if o.hardware == "" {
		return errors.New("--hardware is required: the hardware type whose profiles this backend runs, e.g. v100")
	}
	if len(o.files) == 0 {
		return errors.New("no config given: pass -c FILE (repeatable) with the profiles of the hardware")
	}
	build, ok := backendExecutors[o.executor]
	if !ok {
		return fmt.Errorf("--executor %q: allowed: %s", o.executor, backendExecutorNames())
	}
	if o.logFmt != "json" && o.logFmt != "console" {
		return fmt.Errorf("--log %q: allowed: json, console", o.logFmt)
	}
	cfg, err := api.Load(o.files...)
	if err != nil {
		return err
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
	log, err := newBackendLogger(o.logFmt)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := backends.NewMetrics(reg)
	if err != nil {
		return err
	}
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
	if o.metrics != "" {
		mlis, err := net.Listen("tcp", o.metrics)
		if err != nil {
			lis.Close()
			return fmt.Errorf("--metrics-listen %s: %w", o.metrics, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(mlis) }()
		defer hs.Close()
		log.Info("metrics serving", zap.String("address", mlis.Addr().String()))
	}
	g := backends.NewGRPCServer(srv)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	addr := lis.Addr().String()
	log.Info("backend serving", zap.String("address", addr), zap.String("hardware", o.hardware),
		zap.String("executor", o.executor), zap.Strings("models", exec.Models()))
	if ready != nil {
		ready(addr)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
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

func newBackendLogger(format string) (*zap.Logger, error) {
	if format == "console" {
		return zap.NewDevelopment()
	}
	return zap.NewProduction()
}
