package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
)

var calibrationLabels = []string{"model", "hardware", "device", "batch", "concurrency"}

// The calibration's descriptors (CalibrationCollector).
var (
	DescCalibrationProfiled = prometheus.NewDesc(CalibrationProfiledSeconds,
		"The offline profile's duration of one batch of the series' model at its batch size and concurrency on its hardware type (0: no profile entry).",
		calibrationLabels, nil)
	DescCalibrationMeasured = prometheus.NewDesc(CalibrationMeasuredSeconds,
		"The measured batch duration on the device: the high quantile (--calibration: 0.9) of its latest batches' call durations (docs/calibration.md).",
		calibrationLabels, nil)
	DescCalibrationSamples = prometheus.NewDesc(CalibrationSamples,
		"Batches in the series' window (at most 64); the estimate is used for planning from 10.",
		calibrationLabels, nil)
)

// CalibrationCollector exports e's series at scrape time: profiled and
// measured duration and samples per (model, hardware, device, batch,
// concurrency). Register it once; it reads e with Snapshot (control path).
func CalibrationCollector(e *calibrate.Estimator) prometheus.Collector { return calCollector{e} }

type calCollector struct{ e *calibrate.Estimator }

func (c calCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- DescCalibrationProfiled
	ch <- DescCalibrationMeasured
	ch <- DescCalibrationSamples
}

func (c calCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.e.Snapshot() {
		l := []string{m.Model, m.Hardware, m.Device, strconv.Itoa(m.Batch), strconv.Itoa(m.Concurrency)}
		ch <- prometheus.MustNewConstMetric(DescCalibrationProfiled, prometheus.GaugeValue, m.Profiled.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(DescCalibrationMeasured, prometheus.GaugeValue, m.Estimate.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(DescCalibrationSamples, prometheus.GaugeValue, float64(m.Samples), l...)
	}
}

// DescCalibrationColocation is ColocationCollector's descriptor.
var DescCalibrationColocation = prometheus.NewDesc(CalibrationColocationSlowdown,
	"A model's measured batch duration on a device the plan shares with other models (label with, comma-separated) over the same entry's on devices where it runs alone (1: no interference).",
	append(append([]string(nil), calibrationLabels...), "with"), nil)

// ColocationCollector exports e's co-location slowdowns for the plan plan()
// returns (the placed plan served now) at scrape time.
func ColocationCollector(e *calibrate.Estimator, plan func() *api.Plan) prometheus.Collector {
	return colCollector{e, plan}
}

type colCollector struct {
	e    *calibrate.Estimator
	plan func() *api.Plan
}

func (c colCollector) Describe(ch chan<- *prometheus.Desc) { ch <- DescCalibrationColocation }

func (c colCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.e.Colocations(c.plan()) {
		ch <- prometheus.MustNewConstMetric(DescCalibrationColocation, prometheus.GaugeValue, m.Slowdown,
			m.Model, m.Hardware, m.Device, strconv.Itoa(m.Batch), strconv.Itoa(m.Concurrency), strings.Join(m.With, ","))
	}
}
