package status

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/piccolo-serving/piccolo/metrics"
)

// writeCalibration prints the calibration's series (piccolo_calibration_*),
// one line per model and device: the batch size measured most, its profiled
// and measured (p90) batch duration and their ratio, and the batches measured
// at every size; nothing when the gateway serves none (--calibration=false,
// or no batch yet).
func writeCalibration(w io.Writer, now *snapshot) {
	meas := now.series(metrics.CalibrationMeasuredSeconds)
	if len(meas) == 0 {
		return
	}
	key := func(l map[string]string) string {
		return l["model"] + "\x00" + l["device"] + "\x00" + l["hardware"] + "\x00" + l["batch"] + "\x00" + l["concurrency"]
	}
	prof, samples := map[string]float64{}, map[string]float64{}
	for _, sr := range now.series(metrics.CalibrationProfiledSeconds) {
		prof[key(sr.labels)] = sr.value
	}
	for _, sr := range now.series(metrics.CalibrationSamples) {
		samples[key(sr.labels)] = sr.value
	}
	type line struct {
		model, device, hw, batch string
		prof, meas, best, total  float64
	}
	lines := map[string]*line{}
	for _, sr := range meas {
		l, k := sr.labels, key(sr.labels)
		md := l["model"] + "\x00" + l["device"]
		ln := lines[md]
		if ln == nil {
			ln = &line{model: l["model"], device: l["device"], hw: l["hardware"], best: -1}
			lines[md] = ln
		}
		ln.total += samples[k]
		if samples[k] > ln.best {
			ln.batch, ln.prof, ln.meas, ln.best = l["batch"], prof[k], sr.value, samples[k]
		}
	}
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(w, "calibration (measured: p90 of the latest batches at the batch size measured most):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tDEVICE\tHARDWARE\tBATCH\tPROFILED\tMEASURED\tRATIO\tSAMPLES")
	for _, k := range keys {
		ln := lines[k]
		ratio, prof := "-", "-" // no profile entry at that batch size
		if ln.prof > 0 {
			ratio, prof = fmt.Sprintf("×%.2f", ln.meas/ln.prof), fmtDur(ln.prof)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n", ln.model, ln.device, ln.hw, ln.batch, prof, fmtDur(ln.meas), ratio, ln.total)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
