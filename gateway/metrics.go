package gateway

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Metrics are the gateway's Prometheus metrics:
//
//	piccolo_gateway_requests_total{session, protocol, code}  requests answered, by HTTP status
//	piccolo_gateway_request_seconds{session}                 end-to-end latency of successful requests
//
// Children are resolved when the session table is set, so a request only does
// atomic adds (no label lookup, no lock). Requests to unknown sessions count under
// session "".
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	table    atomic.Pointer[map[string]*sessionMetrics]
	handler  fasthttp.RequestHandler
}

type sessionMetrics struct {
	codes   [2]map[int]prometheus.Counter // by protocol: 0 HTTP, 1 gRPC
	latency prometheus.Observer
}

// metricCodes are the statuses the gateway answers with.
var metricCodes = []int{200, 400, 404, 405, 413, 429, 499, 502, 503, 504}

// NewMetrics registers the gateway's metrics on reg and serves reg's metrics.
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "piccolo_gateway_requests_total",
			Help: "Inference requests answered, by session, protocol and HTTP status (gRPC codes mapped to the same)."},
			[]string{"session", "protocol", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "piccolo_gateway_request_seconds",
			Help:    "End-to-end latency of successful inference requests, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"session"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.setSessions(nil)
	return m, nil
}

func (m *Metrics) setSessions(names []string) {
	t := make(map[string]*sessionMetrics, len(names)+1)
	for _, n := range append([]string{""}, names...) {
		sm := &sessionMetrics{latency: m.latency.WithLabelValues(n)}
		for p, proto := range []string{"http", "grpc"} {
			sm.codes[p] = make(map[int]prometheus.Counter, len(metricCodes))
			for _, c := range metricCodes {
				sm.codes[p][c] = m.requests.WithLabelValues(n, proto, strconv.Itoa(c))
			}
		}
		t[n] = sm
	}
	m.table.Store(&t)
}

// observe counts one answered request; grpc selects the protocol label.
func (m *Metrics) observe(session string, grpc bool, status int, took time.Duration) {
	if m == nil {
		return
	}
	t := *m.table.Load()
	sm, ok := t[session]
	if !ok {
		sm = t[""]
	}
	p := 0
	if grpc {
		p = 1
	}
	c, ok := sm.codes[p][status]
	if !ok {
		c = sm.codes[p][http.StatusBadGateway]
	}
	c.Inc()
	if status == http.StatusOK {
		sm.latency.Observe(took.Seconds())
	}
}

var (
	descItems = prometheus.NewDesc("piccolo_dispatcher_items_total",
		"Items of a module's dispatcher by outcome: submitted, completed, failed, deadline_on_submit, deadline_on_send.",
		[]string{"session", "module", "outcome"}, nil)
	descDummies = prometheus.NewDesc("piccolo_dispatcher_dummies_total",
		"Dummy arrivals of a module (§III-D): injected, dropped (their batch held no real item).",
		[]string{"session", "module", "outcome"}, nil)
	descBatches = prometheus.NewDesc("piccolo_dispatcher_batches_total",
		"Batches sent to a slot (machine) of a module's plan.", []string{"session", "module", "slot"}, nil)
	descOutstanding = prometheus.NewDesc("piccolo_gateway_module_outstanding",
		"Items submitted to a module and not yet done (what admission control reads).", []string{"session", "module"}, nil)
)

var _ prometheus.Collector = (*LiveRunner)(nil)

// Describe implements prometheus.Collector.
func (r *LiveRunner) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descItems, descDummies, descBatches, descOutstanding} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the dispatchers' counters at scrape time.
func (r *LiveRunner) Collect(ch chan<- prometheus.Metric) {
	for s, mods := range r.sessions {
		for m, lm := range mods {
			st := lm.disp.Stats()
			for _, kv := range []struct {
				outcome string
				v       uint64
			}{{"submitted", st.Submitted}, {"completed", st.Completed}, {"failed", st.Failed},
				{"deadline_on_submit", st.DeadlineOnSubmit}, {"deadline_on_send", st.DeadlineOnSend}} {
				ch <- prometheus.MustNewConstMetric(descItems, prometheus.CounterValue, float64(kv.v), s, m, kv.outcome)
			}
			ch <- prometheus.MustNewConstMetric(descDummies, prometheus.CounterValue, float64(st.DummiesInjected), s, m, "injected")
			ch <- prometheus.MustNewConstMetric(descDummies, prometheus.CounterValue, float64(st.DummiesDropped), s, m, "dropped")
			for _, sl := range st.Slots {
				ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(sl.Batches), s, m, sl.Slot.String())
			}
			ch <- prometheus.MustNewConstMetric(descOutstanding, prometheus.GaugeValue, float64(lm.outstanding.Load()), s, m)
		}
	}
}
