package status

import (
	"bytes"
	"testing"
)

// The calibration table: one line per model and device, at the batch size
// measured most, with the batches of every size summed.
func TestWriteCalibration(t *testing.T) {
	l := func(model, dev, batch string) string {
		return `{batch="` + batch + `",concurrency="1",device="` + dev + `",hardware="t4",model="` + model + `"}`
	}
	now := parseSnapshot(t, `
piccolo_calibration_profiled_seconds`+l("m2", "t4-0", "4")+` 0.256
piccolo_calibration_measured_seconds`+l("m2", "t4-0", "4")+` 0.3379
piccolo_calibration_samples`+l("m2", "t4-0", "4")+` 60
piccolo_calibration_profiled_seconds`+l("m2", "t4-0", "1")+` 0.16
piccolo_calibration_measured_seconds`+l("m2", "t4-0", "1")+` 0.2
piccolo_calibration_samples`+l("m2", "t4-0", "1")+` 26
piccolo_calibration_profiled_seconds`+l("m3", "t4-1", "8")+` 0
piccolo_calibration_measured_seconds`+l("m3", "t4-1", "8")+` 0.5
piccolo_calibration_samples`+l("m3", "t4-1", "8")+` 12
`)
	var b bytes.Buffer
	writeCalibration(&b, now)
	want := `calibration (measured: p90 of the latest batches at the batch size measured most):
  MODEL  DEVICE  HARDWARE  BATCH  PROFILED  MEASURED  RATIO  SAMPLES
  m2     t4-0    t4        4      256ms     337.9ms   ×1.32  86
  m3     t4-1    t4        8      -         500ms     -      12

`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	writeCalibration(&b, parseSnapshot(t, "piccolo_plan_cost 3\n"))
	if b.Len() != 0 {
		t.Errorf("a gateway without calibration: %q; want nothing", b.String())
	}
}
