package metrics_test

import (
	"bytes"
	"context"
	"io"
	"maps"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/kserve/kservetest"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
)

const metricsConfig = `
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 16ms}
      - {batch: 8, concurrency: 1, duration: 24ms}
  - model: rec
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 8ms}
      - {batch: 4, concurrency: 1, duration: 12ms}
      - {batch: 8, concurrency: 1, duration: 20ms}
sessions:
  - name: pipe
    slo: 400ms
    modules:
      - {name: detect, model: det, rate: 40}
      - {name: recognize, model: rec, rate: 40, after: [detect]}
`

// metricsGateway is a gateway with every metric on, over two sim backends.
type metricsGateway struct {
	url     string
	metrics *metrics.Metrics
	runner  *dataplane.LiveRunner
}

func startMetricsGateway(t testing.TB, configText string) *metricsGateway {
	t.Helper()
	base, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(configText)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(configText)},
		api.NamedDoc{Name: "backends.yaml", Data: []byte(testharness.StartSimBackends(t, base.Profiles, 2))})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	took := time.Since(start)
	reg := prometheus.NewRegistry()
	metrics, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.SetPlan(plan, "initial", took); err != nil {
		t.Fatal(err)
	}
	metrics.SetMembership(cfg.Backends)
	runner, err := dataplane.NewLiveRunner(context.Background(), cfg, plan, dataplane.LiveOptions{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	reg.MustRegister(runner)
	exec, err := gateway.NewDAGRunner(runner, cfg.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kserve.NewServer(exec, kserve.ServerOptions{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	return &metricsGateway{url: kservetest.ServeHTTP(t, srv), metrics: metrics, runner: runner}
}

// scrape reads url's /metrics, checks it with promlint (what `promtool check
// metrics` runs) and parses it.
func scrape(t testing.TB, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams, string(text)
}

// sample returns the value of the family's series whose labels include want
// (counter, gauge or histogram count); found is false when none matches.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if w, ok := want[lp.GetName()]; ok && w == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// histogramQuantile returns the upper bound of the bucket holding the q-th
// nearest-rank observation, and the bound below it.
func histogramQuantile(h *dto.Histogram, q float64) (lower, upper float64) {
	rank := uint64(math.Ceil(q * float64(h.GetSampleCount())))
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= rank {
			return lower, b.GetUpperBound()
		}
		lower = b.GetUpperBound()
	}
	return lower, math.Inf(1)
}

// TestMetricsAgreeWithLoadgen runs a short open-loop load through a two-module
// session and checks that what /metrics says agrees with what the load
// generator measured: request counts exactly, latency within bucket resolution,
// and the module, batch, slot and plan series consistent with each other.
func TestMetricsAgreeWithLoadgen(t *testing.T) {
	g := startMetricsGateway(t, metricsConfig)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{Target: g.url, Session: "pipe", Rate: 30,
		Arrival: "poisson", Duration: 2 * time.Second, Drain: 5 * time.Second, SLO: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent < 20 || rep.Completed != rep.Sent {
		t.Fatalf("loadgen: sent %d, completed %d, errors %v: want every request answered", rep.Sent, rep.Completed, rep.Errors)
	}
	fams, text := scrape(t, g.url)
	pipe := map[string]string{"session": "pipe"}
	t.Logf("loadgen: sent %d ok %d errors %v p50 %.1f ms p90 %.1f ms", rep.Sent, rep.OK, rep.Errors, rep.P50Ms, rep.P90Ms)

	// Request counts: exactly what the client saw, by outcome.
	total, _ := sample(fams, "piccolo_gateway_requests_total", pipe)
	ok, _ := sample(fams, "piccolo_gateway_requests_total", map[string]string{"session": "pipe", "code": "200", "protocol": "http"})
	rejected, _ := sample(fams, "piccolo_gateway_admission_rejections_total", pipe)
	if int64(total) != rep.Sent || int64(ok) != rep.OK || int64(rejected) != rep.Errors["rejected: overloaded"] {
		t.Errorf("/metrics: %v requests, %v ok, %v rejected; loadgen: sent %d, ok %d, errors %v", total, ok, rejected, rep.Sent, rep.OK, rep.Errors)
	}
	if n, _ := sample(fams, "piccolo_gateway_request_seconds", pipe); int64(n) != rep.OK {
		t.Errorf("piccolo_gateway_request_seconds_count = %v, loadgen ok = %d", n, rep.OK)
	}

	// Latency: the gateway's clock starts after the client's and stops before
	// it, so the client's median lies at or above the gateway's median bucket's
	// lower bound and at most one bucket (×2) above its upper bound, plus
	// loopback overhead.
	h := fams["piccolo_gateway_request_seconds"].GetMetric()
	var hist *dto.Histogram
	for _, m := range h {
		if hasLabels(m, pipe) {
			hist = m.GetHistogram()
		}
	}
	for _, q := range []struct {
		q    float64
		them float64
	}{{0.5, rep.P50Ms}, {0.9, rep.P90Ms}} {
		lo, hi := histogramQuantile(hist, q.q)
		if c := q.them / 1000; c < lo || c > 2*hi+0.010 {
			t.Errorf("p%v: loadgen %.1f ms, gateway histogram bucket (%.0f, %.0f] ms", q.q*100, q.them, lo*1000, hi*1000)
		}
	}

	// SLO violations: at least every answer that was not a success; at most
	// those plus the successes the client saw late.
	late := int64(0)
	for _, l := range rep.Latencies {
		if l > 400*time.Millisecond {
			late++
		}
	}
	viol, _ := sample(fams, "piccolo_gateway_slo_violations_total", pipe)
	if failures := rep.Sent - rep.OK; int64(viol) < failures || int64(viol) > failures+late {
		t.Errorf("piccolo_gateway_slo_violations_total = %v; want between %d (failures) and %d (+ late successes)", viol, failures, failures+late)
	}

	// Modules: every completed item has one queue and one compute observation;
	// every batch one size observation, whose sum is the items and dummies the
	// slots were sent.
	for _, mod := range []string{"detect", "recognize"} {
		sm := map[string]string{"session": "pipe", "module": mod}
		completed, _ := sample(fams, "piccolo_dispatcher_items_total", map[string]string{"session": "pipe", "module": mod, "outcome": "completed"})
		failed, _ := sample(fams, "piccolo_dispatcher_items_total", map[string]string{"session": "pipe", "module": mod, "outcome": "failed"})
		q, _ := sample(fams, "piccolo_gateway_module_queue_seconds", sm)
		c, _ := sample(fams, "piccolo_gateway_module_compute_seconds", sm)
		if completed < float64(rep.OK) || q != completed || c != completed || failed != 0 {
			t.Errorf("%s: completed %v failed %v, queue count %v, compute count %v; want queue = compute = completed ≥ %d ok requests", mod, completed, failed, q, c, rep.OK)
		}
		batches, _ := sample(fams, "piccolo_dispatcher_batches_total", sm)
		sizes, _ := sample(fams, "piccolo_gateway_batch_size", sm)
		items, _ := sample(fams, "piccolo_dispatcher_slot_items_total", sm)
		dummies, _ := sample(fams, "piccolo_dispatcher_slot_dummies_total", sm)
		var sizeSum float64
		for _, m := range fams["piccolo_gateway_batch_size"].GetMetric() {
			if hasLabels(m, sm) {
				sizeSum = m.GetHistogram().GetSampleSum()
			}
		}
		if batches == 0 || sizes != batches || items != completed || sizeSum != items+dummies {
			t.Errorf("%s: %v batches, %v batch sizes observed summing to %v; slots got %v items + %v dummies (completed %v)",
				mod, batches, sizes, sizeSum, items, dummies, completed)
		}
		busy, _ := sample(fams, "piccolo_dispatcher_slot_busy_seconds_total", sm)
		if busy <= 0 || busy > rep.DurationS*2*4 {
			t.Errorf("%s: busy %v lane-seconds over a %.1f s run", mod, busy, rep.DurationS)
		}
		if r, ok := sample(fams, "piccolo_plan_module_rate", map[string]string{"session": "pipe", "module": mod, "kind": "request"}); !ok || r != 40 {
			t.Errorf("%s: planned request rate %v (found %v), want 40", mod, r, ok)
		}
		if b, _ := sample(fams, "piccolo_plan_module_budget_seconds", sm); b <= 0 || b > 0.4 {
			t.Errorf("%s: budget %v s, want in (0, 0.4]", mod, b)
		}
	}

	// Plan and membership.
	for _, want := range []string{
		`piccolo_plan_replans_total{cause="initial"} 1`,
		`piccolo_plan_replans_total{cause="rate"} 0`,
		`piccolo_membership_backends{hardware="v100"} 2`,
		`piccolo_planner_seconds_count 1`,
		`piccolo_plan_session_slo_seconds{session="pipe"} 0.4`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if c, _ := sample(fams, "piccolo_plan_cost", nil); c <= 0 {
		t.Errorf("piccolo_plan_cost = %v, want > 0", c)
	}
	if a, _ := sample(fams, "piccolo_plan_age_seconds", nil); a <= 0 || a > 120 {
		t.Errorf("piccolo_plan_age_seconds = %v, want in (0, 120]", a)
	}
}

func TestMetricsSetPlanRejectsUnknownCause(t *testing.T) {
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	err = m.SetPlan(&api.Plan{}, "whim", 0)
	if err == nil || !strings.Contains(err.Error(), `"whim"`) || !strings.Contains(err.Error(), "membership") {
		t.Errorf("SetPlan(cause whim) = %v, want an error naming the cause and the allowed ones", err)
	}
}

func TestMetricsMembershipKeepsGoneHardwareAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetMembership([]api.Backend{{ID: "a", Hardware: "v100"}, {ID: "b", Hardware: "t4"}, {ID: "c", Hardware: "t4"}})
	m.SetMembership([]api.Backend{{ID: "a", Hardware: "v100"}})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "piccolo_membership_backends" {
			continue
		}
		for _, s := range f.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
		}
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(got) != 2 || got["v100"] != 1 || got["t4"] != 0 {
		t.Errorf("membership after t4 left: %v (keys %v), want v100 1, t4 0", got, keys)
	}
}

// BenchmarkGatewayMetricsOnOff measures, in one run, the gateway's HTTP
// throughput on a one-module echo session with every request metric on and
// with metrics off, alternating rounds; it reports both and the loss
// (target ≤ 5%).
//
//	go test -run '^$' -bench GatewayMetricsOnOff -benchtime 20000x ./metrics
func BenchmarkGatewayMetricsOnOff(b *testing.B) {
	sessions := gatewaytest.SessionsFromYAML(b, `
sessions:
  - name: echo
    slo: 1s
    modules:
      - {name: e, model: m, rate: 1}
`)
	serve := func(withMetrics bool) string {
		exec, err := gateway.NewDAGRunner(gatewaytest.EchoRunner{}, sessions)
		if err != nil {
			b.Fatal(err)
		}
		var opts kserve.ServerOptions
		if withMetrics {
			reg := prometheus.NewRegistry()
			if opts.Metrics, err = metrics.NewMetrics(reg); err != nil {
				b.Fatal(err)
			}
		}
		srv, err := kserve.NewServer(exec, opts)
		if err != nil {
			b.Fatal(err)
		}
		return testharness.ServeFast(b, srv.HandleHTTP)
	}
	on, off := serve(true), serve(false)
	const conc = 16
	testharness.Hammer(b, on, "/v2/models/echo/infer", testharness.InferBody, 500, conc)
	testharness.Hammer(b, off, "/v2/models/echo/infer", testharness.InferBody, 500, conc)
	b.ResetTimer()
	var onRate, offRate float64
	rounds := 6
	per := max(b.N/rounds, 200)
	for i := range rounds {
		if i%2 == 0 { // alternate which goes first
			onRate += testharness.Hammer(b, on, "/v2/models/echo/infer", testharness.InferBody, per, conc) / float64(rounds)
			offRate += testharness.Hammer(b, off, "/v2/models/echo/infer", testharness.InferBody, per, conc) / float64(rounds)
		} else {
			offRate += testharness.Hammer(b, off, "/v2/models/echo/infer", testharness.InferBody, per, conc) / float64(rounds)
			onRate += testharness.Hammer(b, on, "/v2/models/echo/infer", testharness.InferBody, per, conc) / float64(rounds)
		}
	}
	b.ReportMetric(onRate, "metrics_on_req/s")
	b.ReportMetric(offRate, "metrics_off_req/s")
	b.ReportMetric(100*(1-onRate/offRate), "loss_%")
}

// The capacity gauges: desired per hardware from the plan's placement,
// available from the pool; a type the plan no longer wants reads 0 desired,
// and a type the pool lacks reads 0 available (what an autoscaler scales on).
func TestMetricsCapacityDesiredAndAvailable(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetMembership([]api.Backend{{ID: "a", Hardware: "v100"}})
	m.SetCapacity(map[string]int{"v100": 3, "t4": 2})
	read := func() map[string]float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			name := strings.TrimPrefix(f.GetName(), "piccolo_capacity_")
			if name == f.GetName() {
				continue
			}
			for _, s := range f.GetMetric() {
				got[name+"/"+s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
		return got
	}
	want := map[string]float64{"desired_machines/v100": 3, "desired_machines/t4": 2, "available_machines/v100": 1, "available_machines/t4": 0}
	if got := read(); !maps.Equal(got, want) {
		t.Errorf("after a plan wanting 3 v100 and 2 t4 on one v100: %v, want %v", got, want)
	}
	m.SetMembership([]api.Backend{{ID: "a", Hardware: "v100"}, {ID: "b", Hardware: "v100"}, {ID: "c", Hardware: "v100"}, {ID: "d", Hardware: "t4"}})
	m.SetCapacity(map[string]int{"v100": 1})
	want = map[string]float64{"desired_machines/v100": 1, "desired_machines/t4": 0, "available_machines/v100": 3, "available_machines/t4": 1}
	if got := read(); !maps.Equal(got, want) {
		t.Errorf("after the pool grew and the plan shrank: %v, want %v", got, want)
	}
}
