package backends_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

func TestMetricsCountBatchesItemsAndErrors(t *testing.T) {
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(testProfiles), &cfg); err != nil {
		t.Fatal(err)
	}
	exec, err := sim.New("v100", cfg.Profiles, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := backends.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := backends.NewServer(exec, backends.ServerOptions{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	b := serve(t, srv)
	load(t, b, "m", 4, 1)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := b.client.Infer(ctx, "m", [][]api.Tensor{item(1, 1), item(2, 2)}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = b.client.Infer(ctx, "m", [][]api.Tensor{item(1, 5)}) // above max batch 4
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"piccolo_backend_batches_total", map[string]string{"model": "m"}, 2},
		{"piccolo_backend_items_total", map[string]string{"model": "m"}, 6},
		{"piccolo_backend_errors_total", map[string]string{"model": "m", "code": "InvalidArgument"}, 1},
		{"piccolo_backend_model_max_batch", map[string]string{"model": "m"}, 4},
		{"piccolo_backend_model_concurrency", map[string]string{"model": "m"}, 1},
		{"piccolo_backend_batch_seconds", map[string]string{"model": "m"}, 2},                    // sample count
		{"piccolo_backend_received_bytes_total", map[string]string{"model": "m"}, 2 * 3 * 4 * 4}, // 2 calls of 3 rows of 4 FP32
	} {
		if got, ok := metricValue(t, reg, tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	// Each call answers at least output0 FP32 [3,1].
	if got, _ := metricValue(t, reg, "piccolo_backend_sent_bytes_total", map[string]string{"model": "m"}); got < 2*3*4 {
		t.Errorf("piccolo_backend_sent_bytes_total = %v, want ≥ %v", got, 2*3*4)
	}
	if err := b.client.Unload(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, ok := metricValue(t, reg, "piccolo_backend_model_max_batch", map[string]string{"model": "m"}); ok {
		t.Error("max-batch series still there after unload")
	}
}

// metricValue returns the value (a histogram's sample count) of the series of
// name with exactly labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}
