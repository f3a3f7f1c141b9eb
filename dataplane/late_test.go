package dataplane

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/backends/faults"
)

// A batch answered after its request's deadline is logged, at most once a
// second, with its module, backend and how late it was; a line counts the
// late batches left out since the one before. Both backends 20× slower than
// their profile and no calibration (no pace, so admission believes the
// profile): every batch is late.
func TestLateBatchIsLoggedOnceASecond(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	rig := startFaultRig(t, 2, LiveOptions{Logger: zap.New(core)})
	for _, inj := range rig.inj {
		if err := inj.Set(faults.Set{Slow: 20}); err != nil {
			t.Fatal(err)
		}
	}
	res := rig.openLoop(t, 100, 2500*time.Millisecond, nil)
	t.Log(res)
	lines := logs.FilterMessage("batch answered after its oldest item's deadline").All()
	if len(lines) < 2 {
		t.Fatalf("%d late-batch lines; want one a second over a run of 2.5 s with every batch late (%v)", len(lines), res)
	}
	var leftOut uint64
	for i, e := range lines {
		f := e.ContextMap()
		if f["module"] != "m" || f["session"] != "s" || f["backend"] != "gpu-0" && f["backend"] != "gpu-1" {
			t.Errorf("line %d names module %v of session %v on %v; want m of s on gpu-0 or gpu-1", i, f["module"], f["session"], f["backend"])
		}
		if late, ok := f["late_by"].(time.Duration); !ok || late <= 0 {
			t.Errorf("line %d: late_by %v; want > 0", i, f["late_by"])
		}
		if i > 0 {
			if gap := e.Time.Sub(lines[i-1].Time); gap < 900*time.Millisecond {
				t.Errorf("lines %d and %d %v apart; want at most one a second", i-1, i, gap)
			}
			leftOut += f["left_out_before"].(uint64)
		}
	}
	if leftOut == 0 {
		t.Errorf("no late batch left out between %d lines over 2.5 s of late batches; want them counted", len(lines))
	}
}
