package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/backends/nvml"
)

// checkConsulFlags checks --consul and --id before anything starts.
func checkConsulFlags(o *backendOptions) error {
	if o.id != "" && o.consul == "" {
		return errors.New("--id is only used with --consul: it names the Consul registration")
	}
	return nil
}

// backendMember describes this backend for membership: id (--id, else
// <hardware>-<host>-<port>), address, hardware, its price from the catalog,
// the first GPU NVML read, and the executor's models.
func backendMember(o *backendOptions, cfg *api.Config, tel *nvml.Telemetry, models []string, addr string) membership.Member {
	m := membership.Member{ID: o.id, Address: addr, Hardware: o.hardware, Models: models, TLS: o.tls.on()}
	if m.ID == "" {
		host, port, _ := net.SplitHostPort(addr)
		m.ID = strings.NewReplacer(":", "-", "[", "", "]", "").Replace(o.hardware + "-" + host + "-" + port)
	}
	if h, ok := cfg.HardwareByName(o.hardware); ok {
		m.Price = h.Price
	}
	if tel != nil {
		if ds := tel.Devices(); len(ds) > 0 {
			m.GPU, m.GPUMemoryBytes = ds[0].Name, ds[0].MemoryBytes
		}
	}
	return m
}

// registerBackend registers the serving backend with the Consul agent at
// --consul (a TCP check on its gRPC address) and returns the deregistration to
// run on shutdown, before the drain, so gateways stop sending first. Without
// --consul it does nothing.
func registerBackend(ctx context.Context, o *backendOptions, m membership.Member, log *zap.Logger) (deregister func(), err error) {
	if o.consul == "" {
		return func() {}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dereg, err := membership.RegisterWith(rctx, o.consul, m, membership.RegisterOptions{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--consul %s: %w", o.consul, err)
	}
	log.Info("registered with consul", zap.String("consul", o.consul), zap.String("id", m.ID),
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
