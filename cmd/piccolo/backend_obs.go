package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/nvml"
)

// metricsPortOffset is how far above its gRPC port a backend serves /metrics
// by default (--metrics-listen auto): 9101 → 10101.
const metricsPortOffset = 1000

// listenOff reports whether an optional listener's flag turns it off: "" or
// "off", the same two spellings for backend --metrics-listen and scheduler
// --listen.
func listenOff(flag string) bool { return flag == "" || flag == "off" }

// backendMetricsAddr resolves --metrics-listen: "off" or "" serves none (""),
// "auto" the gRPC listener's host at its port + metricsPortOffset (port 0 when
// the gRPC port is 0), anything else is used as given.
func backendMetricsAddr(flag, grpcAddr string) (string, error) {
	switch {
	case listenOff(flag):
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
		p += metricsPortOffset
	}
	if p > 65535 {
		return "", fmt.Errorf("--metrics-listen auto: gRPC port %d + %d is over 65535; give --metrics-listen HOST:PORT", p-metricsPortOffset, metricsPortOffset)
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// openBackendGPU opens NVML telemetry when enabled; the error says why there
// is none (nvml.ErrNoGPU on a machine without a GPU).
func openBackendGPU(enabled bool) (*nvml.Telemetry, error) {
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
