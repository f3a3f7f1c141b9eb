package backends

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of a Server, all labelled by model. The
// per-model children are resolved once, at load, so ModelInfer only adds to
// counters it already holds.
type Metrics struct {
	batches     *prometheus.CounterVec
	items       *prometheus.CounterVec
	errors      *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	inBytes     *prometheus.CounterVec
	outBytes    *prometheus.CounterVec
	maxBatch    *prometheus.GaugeVec
	concurrency *prometheus.GaugeVec
	referenced  *prometheus.CounterVec
	held        prometheus.Gauge
}

// NewMetrics creates the backend metrics and registers them on reg:
// piccolo_backend_batches_total, piccolo_backend_items_total,
// piccolo_backend_errors_total (by gRPC code), piccolo_backend_batch_seconds
// (executor run time, queueing for a lane included),
// piccolo_backend_received_bytes_total and piccolo_backend_sent_bytes_total
// (tensor bytes of successful calls' raw_input_contents and
// raw_output_contents: what crossed the network to and from this backend,
// protobuf framing aside; docs/fusion.md compares them fused and unfused), and
// the loaded settings
// piccolo_backend_model_max_batch and piccolo_backend_model_concurrency (absent
// when the model is not loaded); for locality (docs/locality.md)
// piccolo_backend_referenced_bytes_total (input bytes a call named as held
// instead of sending them) and piccolo_backend_held_bytes (the bytes held).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_batches_total", Help: "Batches run (successful ModelInfer calls)."}, []string{"model"}),
		items:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_items_total", Help: "Items (dimension-0 rows) run in successful batches."}, []string{"model"}),
		errors:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_errors_total", Help: "Failed ModelInfer calls by gRPC code."}, []string{"model", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "piccolo_backend_batch_seconds", Help: "Executor time of one batch in seconds, waiting for a lane included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"model"}),
		inBytes:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_received_bytes_total", Help: "Tensor bytes received (raw_input_contents) by successful ModelInfer calls."}, []string{"model"}),
		outBytes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_sent_bytes_total", Help: "Tensor bytes sent (raw_output_contents) by successful ModelInfer calls."}, []string{"model"}),
		maxBatch:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "piccolo_backend_model_max_batch", Help: "Loaded max batch of the model."}, []string{"model"}),
		concurrency: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "piccolo_backend_model_concurrency", Help: "Loaded concurrency (lanes) of the model."}, []string{"model"}),
		referenced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_backend_referenced_bytes_total",
			Help: "Input tensor bytes successful ModelInfer calls named as held on this backend instead of sending them (locality)."}, []string{"model"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "piccolo_backend_held_bytes", Help: "Bytes of outputs this backend holds for gateways (locality; at most --hold-mib)."}),
	}
	for _, c := range []prometheus.Collector{m.batches, m.items, m.errors, m.seconds, m.inBytes, m.outBytes, m.maxBatch, m.concurrency, m.referenced, m.held} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// modelMetrics are one loaded model's resolved children; the zero value (no
// Metrics) records nothing.
type modelMetrics struct {
	parent     *Metrics
	model      string
	batches    prometheus.Counter
	items      prometheus.Counter
	seconds    prometheus.Observer
	in, out    prometheus.Counter
	referenced prometheus.Counter
}

func (m *Metrics) forModel(info ModelInfo) modelMetrics {
	if m == nil {
		return modelMetrics{}
	}
	m.maxBatch.WithLabelValues(info.Name).Set(float64(info.MaxBatch))
	m.concurrency.WithLabelValues(info.Name).Set(float64(info.Concurrency))
	return modelMetrics{parent: m, model: info.Name,
		batches: m.batches.WithLabelValues(info.Name), items: m.items.WithLabelValues(info.Name), seconds: m.seconds.WithLabelValues(info.Name),
		in: m.inBytes.WithLabelValues(info.Name), out: m.outBytes.WithLabelValues(info.Name), referenced: m.referenced.WithLabelValues(info.Name)}
}

func (m *Metrics) unloaded(model string) {
	if m == nil {
		return
	}
	m.maxBatch.DeleteLabelValues(model)
	m.concurrency.DeleteLabelValues(model)
}

// ok records a successful batch of n items that took seconds, with its raw
// input and output contents and the input bytes it named as held.
func (mm *modelMetrics) ok(n int, seconds float64, in, out [][]byte, referenced int) {
	if mm.parent == nil {
		return
	}
	if referenced > 0 {
		mm.referenced.Add(float64(referenced))
	}
	mm.batches.Inc()
	mm.items.Add(float64(n))
	mm.seconds.Observe(seconds)
	mm.in.Add(float64(rawSize(in)))
	mm.out.Add(float64(rawSize(out)))
}

func rawSize(raw [][]byte) int {
	size := 0
	for _, b := range raw {
		size += len(b)
	}
	return size
}

func (mm *modelMetrics) failed(code string) {
	if mm.parent == nil {
		return
	}
	mm.parent.errors.WithLabelValues(mm.model, code).Inc()
}
