package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/faults"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/backends/nvml"
	"github.com/piccolo-serving/piccolo/metrics"
)

// Member describes the backend for membership: id (o.ID, else
// <hardware>-<host>-<port>), address addr, hardware, its price from cfg's
// catalog, the first GPU NVML read (tel may be nil), TLS when o.TLS is set,
// and the executor's models.
func Member(o Options, cfg *api.Config, tel *nvml.Telemetry, models []string, addr string) membership.Member {
	m := membership.Member{ID: o.ID, Address: addr, Hardware: o.Hardware, Models: models, TLS: o.TLS != nil}
	if m.ID == "" {
		host, port, _ := net.SplitHostPort(addr)
		m.ID = strings.NewReplacer(":", "-", "[", "", "]", "").Replace(o.Hardware + "-" + host + "-" + port)
	}
	if h, ok := cfg.HardwareByName(o.Hardware); ok {
		m.Price = h.Price
	}
	if tel != nil {
		if ds := tel.Devices(); len(ds) > 0 {
			m.GPU, m.GPUMemoryBytes = ds[0].Name, ds[0].MemoryBytes
		}
	}
	return m
}

// register registers the serving backend with the Consul agent at --consul (a
// TCP check on its gRPC address) and returns the deregistration to run on
// shutdown, before the drain, so gateways stop sending first. Without --consul
// it does nothing.
func register(ctx context.Context, o Options, m membership.Member, log *zap.Logger) (deregister func(), err error) {
	if o.Consul == "" {
		return func() {}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dereg, err := membership.RegisterWith(rctx, o.Consul, m, membership.RegisterOptions{Logger: log, Auth: o.ConsulAuth, BackendToken: o.AdminToken})
	if err != nil {
		return nil, fmt.Errorf("--consul %s: %w", o.Consul, err)
	}
	log.Info("registered with consul", zap.String("consul", o.Consul), zap.String("id", m.ID),
		zap.String("service", membership.ServiceName), zap.Duration("check_interval", membership.CheckInterval))
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := dereg(dctx); err != nil {
			log.Warn("consul deregistration failed; the agent will drop this backend when its check fails", zap.Error(err))
			return
		}
		log.Info("deregistered from consul", zap.String("id", m.ID))
	}, nil
}

// FaultsPath is where the backend's metrics port serves the fault admin API
// (GET/PUT/DELETE with JSON; docs/faults.md).
const FaultsPath = "/admin/faults"

// newFaults parses --fault and returns the backend's fault injector, with its
// gauge on reg, and the faults to set once the listener is wrapped.
func newFaults(o Options, log *zap.Logger, reg prometheus.Registerer) (*faults.Injector, faults.Set, error) {
	initial, err := faults.Parse(o.Faults)
	if err != nil {
		return nil, faults.Set{}, fmt.Errorf("--fault: %w", err)
	}
	inj, err := faults.New(faults.Options{Seed: o.FaultSeed, Logger: log, Registerer: reg})
	if err != nil {
		return nil, faults.Set{}, err
	}
	return inj, initial, nil
}

// MetricsPortOffset is how far above its gRPC port a backend serves /metrics
// by default (--metrics-listen auto): 9101 → 10101.
const MetricsPortOffset = 1000

// MetricsAddr resolves --metrics-listen: "off" or "" serves none (""),
// "auto" the gRPC listener's host at its port + MetricsPortOffset (port 0
// when the gRPC port is 0), anything else is used as given. Errors: a gRPC
// address that is not host:port, or a port over 65535.
func MetricsAddr(flag, grpcAddr string) (string, error) {
	switch {
	case metrics.ListenOff(flag):
		return "", nil
	case flag != "auto":
		return flag, nil
	}
	host, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", fmt.Errorf("--metrics-listen auto: gRPC address %q: %w", grpcAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("--metrics-listen auto: gRPC port %q is not a number", port)
	}
	if p != 0 {
		p += MetricsPortOffset
	}
	if p > 65535 {
		return "", fmt.Errorf("--metrics-listen auto: gRPC port %d + %d is over 65535; give --metrics-listen HOST:PORT", p-MetricsPortOffset, MetricsPortOffset)
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// openGPU opens NVML telemetry when enabled; the error says why there is none
// (nvml.ErrNoGPU on a machine without a GPU).
func openGPU(enabled bool) (*nvml.Telemetry, error) {
	if !enabled {
		return nil, errors.New("GPU telemetry is off (--gpu-telemetry=false)")
	}
	return nvml.Open()
}

// hardwareFromGPU names the backend's hardware type from its first GPU, matched
// against the config's catalog, for a backend started without --hardware.
func hardwareFromGPU(tel *nvml.Telemetry, gpuErr error, cfg *api.Config) (string, error) {
	if tel == nil {
		return "", fmt.Errorf("--hardware is required when no GPU names it (%v): the hardware type whose profiles this backend runs, e.g. v100", gpuErr)
	}
	catalog := make([]string, len(cfg.Hardware))
	for i, h := range cfg.Hardware {
		catalog[i] = h.Name
	}
	hw, _ := tel.HardwareType(catalog)
	return hw, nil
}
