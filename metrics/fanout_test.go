package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/piccolo-serving/piccolo/metrics"
)

// piccolo_gateway_fanout_items counts each fan-out once by its items, in a
// bucket per count up to 16, so an operator reads how often exactly k items
// came (the bucket at k less the one at k−1), what a session's fanout lists.
func TestFanOutItemsHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mm := m.Module("ocr", "rec")
	for _, k := range []int{0, 0, 0, 12, 3} {
		mm.FanOut(k)
	}
	var nilModule *metrics.ModuleMetrics
	nilModule.FanOut(5) // records nothing, does not panic
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metrics.GatewayFanOutItems {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 5 || h.GetSampleSum() != 15 {
			t.Errorf("count %d sum %v; want 5 fan-outs of 15 items", h.GetSampleCount(), h.GetSampleSum())
		}
		exactly := map[float64]uint64{}
		var below uint64
		for _, b := range h.GetBucket() {
			exactly[b.GetUpperBound()] = b.GetCumulativeCount() - below
			below = b.GetCumulativeCount()
		}
		for k, want := range map[float64]uint64{0: 3, 1: 0, 3: 1, 11: 0, 12: 1, 16: 0} {
			if exactly[k] != want {
				t.Errorf("fan-outs of exactly %v items: %d; want %d (buckets %v)", k, exactly[k], want, exactly)
			}
		}
		return
	}
	t.Fatalf("%s not registered", metrics.GatewayFanOutItems)
}
