// Package nvml is a backend's GPU telemetry: it reads the machine's NVIDIA GPUs
// through NVML (github.com/NVIDIA/go-nvml) and exports, per device, its name,
// memory, utilisation and power as Prometheus metrics; it also names the
// backend's hardware type from the device name when `piccolo backend` is not
// given --hardware.
//
// # Without a GPU
//
// Open calls nvml.Init first and nothing else unless it succeeds: without the
// driver library Init returns ERROR_LIBRARY_NOT_FOUND, and calling any other NVML
// function after that kills the process (symbol lookup error). Open then returns
// an error wrapping ErrNoGPU, which callers log once and carry on without
// telemetry. A machine whose driver loads but reports no device is the same.
//
// # Metrics (gpu = device index)
//
//	piccolo_gpu_info{gpu, name, uuid}              1 per device
//	piccolo_gpu_memory_total_bytes{gpu}            device memory
//	piccolo_gpu_memory_used_bytes{gpu}             memory in use
//	piccolo_gpu_utilization_ratio{gpu}             share of the last sample period a kernel ran, 0..1
//	piccolo_gpu_memory_utilization_ratio{gpu}      share of it memory was read or written, 0..1
//	piccolo_gpu_power_watts{gpu}                   power draw
//
// A reading the device does not support (ERROR_NOT_SUPPORTED and other errors)
// is left out of that scrape rather than reported as 0.
//
// # Concurrency
//
// Open and Close are called once, from the backend's main goroutine. The device
// list is read at Open and immutable after; Collect (the Prometheus registry's
// goroutine) reads live values through NVML, which is thread-safe.
//
// Tests use go-nvml's mock (github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100):
// OpenLibrary takes any nvml.Interface.
package nvml
