package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestPlanFusesOCR: with its measured fused profiles, configs/ocr.yaml plans
// cheaper with the per-box chain fused, and --no-fusion plans the seven
// modules as configured. The fused plan names its fused stage and says what it
// fused, and costs less than the unfused one.
func TestPlanFusesOCR(t *testing.T) {
	cost := regexp.MustCompile(`(?m)^session ocr: SLO 3000ms, latency [0-9.]+ms, cost ([0-9.]+)$`)
	fused, err := run(t, "plan", "-c", ocrConfig)
	if err != nil {
		t.Fatalf("piccolo plan: %v\n%s", err, fused)
	}
	plain, err := run(t, "plan", "-c", ocrConfig, "--no-fusion")
	if err != nil {
		t.Fatalf("piccolo plan --no-fusion: %v\n%s", err, plain)
	}
	if !strings.Contains(fused, "fused cls, rotate, rec, ctc into cls+rotate+rec+ctc") || !strings.Contains(fused, "\n  cls+rotate+rec+ctc ") {
		t.Errorf("piccolo plan: no fused per-box stage in\n%s", fused)
	}
	if strings.Contains(plain, "+") || !strings.Contains(plain, "\n  rotate ") {
		t.Errorf("piccolo plan --no-fusion: want the modules as configured, got\n%s", plain)
	}
	f, p := cost.FindStringSubmatch(fused), cost.FindStringSubmatch(plain)
	if f == nil || p == nil {
		t.Fatalf("no session cost line in\n%s\nor\n%s", fused, plain)
	}
	fc, _ := strconv.ParseFloat(f[1], 64)
	pc, _ := strconv.ParseFloat(p[1], 64)
	if !(fc > 0 && fc < pc) {
		t.Errorf("fused cost %v, unfused %v: want the fused plan cheaper", fc, pc)
	}
}
