package metrics

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ProcessRegistry is a Prometheus registry holding the Go runtime and process
// collectors, which every piccolo process (gateway, backend, scheduler) serves.
func ProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serve serves GET /metrics of reg, and the extra handlers by path, on lis
// (the backend's and the standalone scheduler's metrics port; the gateway
// serves /metrics on its own HTTP server), on a goroutine of its own. Close
// the returned server to stop.
func Serve(lis net.Listener, reg *prometheus.Registry, extra map[string]http.HandlerFunc) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for path, h := range extra {
		mux.HandleFunc(path, h)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	return hs
}

// ListenOff reports whether an optional listener's address turns it off: ""
// or "off", the same two spellings for backend --metrics-listen and
// scheduler --listen.
func ListenOff(addr string) bool { return addr == "" || addr == "off" }
