package dataplane

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/planner"
)

// The warm-up on real ONNX Runtime and the Go OCR steps: one `piccolo
// backend --executor ocr` per hardware type of configs/ocr.yaml, the OCR
// session fused. The dummy inputs come from each model's metadata (the ONNX
// models report their fixed input shapes), so every backend of the plan is
// measured by its own warm-up batch before the first request. (Zeros are
// not an image: a data-dependent step such as ocr-boxes finds no box and
// runs faster than profiled, a pace below 1, which counts as 1.)
func TestWarmUpOnOCRBackends(t *testing.T) {
	ocrtest.RequireModels(t)
	cfg, _, err := planner.Fuse(ocrConfig(t), testharness.Planner)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := testharness.Planner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, LiveOptions{Calibration: est, Spare: true, ProbeInterval: -1, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	for _, e := range logs.All() {
		t.Logf("%s %v", e.Message, e.ContextMap())
	}
	if n := logs.FilterMessageSnippet("warm-up batch failed").Len(); n != 0 {
		t.Errorf("%d warm-up failures on the OCR backends; want none", n)
	}
	for id := range sw.Plan().Backends() {
		if sw.Health().entry(id).paceRatio.Load() == 0 {
			t.Errorf("backend %s: no pace of its own after the warm-up", id)
		}
	}
}
