package metrics

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// CalibrationSeries is one calibration series as the metrics show it
// (calibrate.Measured, converted by the caller: metrics sits below
// calibrate's users and does not import it). Slowdown and With are the
// co-location's (ColocationCollector).
type CalibrationSeries struct {
	Model, Hardware, Device string
	Batch, Concurrency      int
	Profiled, Measured      time.Duration
	Samples                 int
	Slowdown                float64
	With                    []string
}

func (r CalibrationSeries) labels() []string {
	return []string{r.Model, r.Hardware, r.Device, strconv.Itoa(r.Batch), strconv.Itoa(r.Concurrency)}
}

// CalibrationCollector exports the series series() returns at scrape time:
// profiled and measured duration and samples per (model, hardware, device,
// batch, concurrency). Register it once; series runs on the scrape's
// goroutine.
func CalibrationCollector(series func() []CalibrationSeries) prometheus.Collector {
	return calCollector{series}
}

type calCollector struct{ series func() []CalibrationSeries }

func (c calCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- DescCalibrationProfiled
	ch <- DescCalibrationMeasured
	ch <- DescCalibrationSamples
}

func (c calCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.series() {
		l := m.labels()
		ch <- prometheus.MustNewConstMetric(DescCalibrationProfiled, prometheus.GaugeValue, m.Profiled.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(DescCalibrationMeasured, prometheus.GaugeValue, m.Measured.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(DescCalibrationSamples, prometheus.GaugeValue, float64(m.Samples), l...)
	}
}

// DescCalibrationColocation is ColocationCollector's descriptor.
var DescCalibrationColocation = prometheus.NewDesc(CalibrationColocationSlowdown,
	"A model's measured batch duration on a device the plan shares with other models (label with, comma-separated) over the same entry's on devices where it runs alone (1: no interference).",
	append(append([]string(nil), calibrationLabels...), "with"), nil)

// ColocationCollector exports the co-location slowdowns series() returns
// (Slowdown and With set) at scrape time.
func ColocationCollector(series func() []CalibrationSeries) prometheus.Collector {
	return colCollector{series}
}

type colCollector struct{ series func() []CalibrationSeries }

func (c colCollector) Describe(ch chan<- *prometheus.Desc) { ch <- DescCalibrationColocation }

func (c colCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.series() {
		ch <- prometheus.MustNewConstMetric(DescCalibrationColocation, prometheus.GaugeValue, m.Slowdown,
			append(m.labels(), strings.Join(m.With, ","))...)
	}
}
