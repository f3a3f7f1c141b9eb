package status

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// writeCalibration prints the calibration's series (piccolo_calibration_*),
// one line per model and device: the batch size measured most, its profiled
// and measured (p90) batch duration and their ratio, and the batches measured
// at every size; nothing when the gateway serves none (--calibration=false,
// or no batch yet).
func writeCalibration(w io.Writer, now *snapshot) {
	lines := liveCalibration(now)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "calibration (measured: p90 of the latest batches at the batch size measured most):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tDEVICE\tHARDWARE\tBATCH\tPROFILED\tMEASURED\tRATIO\tSAMPLES")
	for _, ln := range lines {
		ratio, prof := "-", "-" // no profile entry at that batch size
		if ln.ProfiledSeconds > 0 {
			ratio, prof = fmt.Sprintf("×%.2f", ln.MeasuredSeconds/ln.ProfiledSeconds), fmtDur(ln.ProfiledSeconds)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n", ln.Model, ln.Device, ln.Hardware, ln.Batch, prof, fmtDur(ln.MeasuredSeconds), ratio, ln.Samples)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
