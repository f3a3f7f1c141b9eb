package dataplane

import (
	"fmt"

	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*LiveRunner)(nil)

// classNames label the priority classes (gateway.ClassHigh, ClassNormal,
// ClassLow; dispatcher.Classes of them).
var classNames = [dispatcher.Classes]string{gateway.ClassHigh: "high", gateway.ClassNormal: "normal", gateway.ClassLow: "low"}

// Describe implements prometheus.Collector.
func (r *LiveRunner) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{metrics.DescItems, metrics.DescDummies, metrics.DescClosed, metrics.DescBatches, metrics.DescSlotItems, metrics.DescSlotDummies,
		metrics.DescSlotBusy, metrics.DescSlotLanes, metrics.DescSlotRate, metrics.DescOutstanding, metrics.DescOverflow, metrics.DescLateCommitted, metrics.DescLocal, metrics.DescClassItems} {
		ch <- d
	}
	if r.ownHealth {
		r.health.Describe(ch)
	}
}

// Collect implements prometheus.Collector: the dispatchers' counters at scrape
// time (the request path pays nothing for them).
func (r *LiveRunner) Collect(ch chan<- prometheus.Metric) {
	for s, mods := range r.sessions {
		for m, lm := range mods {
			st := lm.disp.Stats()
			for _, kv := range []struct {
				outcome string
				v       uint64
			}{{"submitted", st.Submitted}, {"completed", st.Completed}, {"failed", st.Failed},
				{"deadline_on_submit", st.DeadlineOnSubmit}, {"deadline_on_send", st.DeadlineOnSend},
				{"cancelled", st.Cancelled}, {"dropped", st.Dropped}} {
				ch <- prometheus.MustNewConstMetric(metrics.DescItems, prometheus.CounterValue, float64(kv.v), s, m, kv.outcome)
			}
			ch <- prometheus.MustNewConstMetric(metrics.DescDummies, prometheus.CounterValue, float64(st.DummiesInjected), s, m, "injected")
			ch <- prometheus.MustNewConstMetric(metrics.DescDummies, prometheus.CounterValue, float64(st.DummiesDropped), s, m, "dropped")
			for c, n := range st.Closed {
				ch <- prometheus.MustNewConstMetric(metrics.DescClosed, prometheus.CounterValue, float64(n), s, m, dispatcher.Closer(c).String())
			}
			ch <- prometheus.MustNewConstMetric(metrics.DescOverflow, prometheus.CounterValue, float64(st.Overflow), s, m)
			ch <- prometheus.MustNewConstMetric(metrics.DescLateCommitted, prometheus.CounterValue, float64(st.LateCommitted), s, m)
			ch <- prometheus.MustNewConstMetric(metrics.DescLocal, prometheus.CounterValue, float64(st.Local), s, m)
			for c, n := range st.ByClass {
				ch <- prometheus.MustNewConstMetric(metrics.DescClassItems, prometheus.CounterValue, float64(n.Submitted), s, m, classNames[c], "submitted")
				ch <- prometheus.MustNewConstMetric(metrics.DescClassItems, prometheus.CounterValue, float64(n.Overloaded), s, m, classNames[c], "overloaded")
			}
			for i, sl := range append(st.Slots, st.Spare...) {
				name := fmt.Sprintf("g%dm%d", sl.Slot.Group, sl.Slot.Machine)
				if i >= len(st.Slots) { // a spare machine: Group −1
					name = fmt.Sprintf("spare%d", sl.Slot.Machine)
				}
				lv := []string{s, m, name, sl.Slot.Backend, sl.Slot.Hardware}
				ch <- prometheus.MustNewConstMetric(metrics.DescBatches, prometheus.CounterValue, float64(sl.Batches), lv...)
				ch <- prometheus.MustNewConstMetric(metrics.DescSlotItems, prometheus.CounterValue, float64(sl.Items), lv...)
				ch <- prometheus.MustNewConstMetric(metrics.DescSlotDummies, prometheus.CounterValue, float64(sl.Dummies), lv...)
				ch <- prometheus.MustNewConstMetric(metrics.DescSlotBusy, prometheus.CounterValue, sl.Busy.Seconds(), lv...)
				ch <- prometheus.MustNewConstMetric(metrics.DescSlotLanes, prometheus.GaugeValue, float64(max(sl.Slot.Concurrency, 1)), lv...)
				ch <- prometheus.MustNewConstMetric(metrics.DescSlotRate, prometheus.GaugeValue, sl.Slot.RatePerSec, lv...)
			}
			ch <- prometheus.MustNewConstMetric(metrics.DescOutstanding, prometheus.GaugeValue, float64(lm.outstanding.Load()), s, m)
		}
	}
	if r.ownHealth {
		r.health.Collect(ch)
	}
}

// eachModule calls f with every module of r (a session kept from the
// runner before is the same *liveModule, dispatcher and counters, in both).
func (r *LiveRunner) eachModule(f func(session, module string, lm *liveModule)) {
	for s, mods := range r.sessions {
		for m, lm := range mods {
			f(s, m, lm)
		}
	}
}
