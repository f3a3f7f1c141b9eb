package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/backends/faults"
)

// faultsPath is where the backend's metrics port serves the fault admin API
// (GET/PUT/DELETE with JSON; docs/faults.md).
const faultsPath = "/admin/faults"

// newBackendFaults parses --fault and returns the backend's fault injector,
// with its gauge on reg, and the faults to set once the listener is wrapped.
func newBackendFaults(o *backendOptions, log *zap.Logger, reg prometheus.Registerer) (*faults.Injector, faults.Set, error) {
	initial, err := faults.Parse(o.faults)
	if err != nil {
		return nil, faults.Set{}, fmt.Errorf("--fault: %w", err)
	}
	inj, err := faults.New(faults.Options{Seed: o.faultSeed, Logger: log, Registerer: reg})
	if err != nil {
		return nil, faults.Set{}, err
	}
	return inj, initial, nil
}
