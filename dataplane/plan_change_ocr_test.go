package dataplane

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/planner"
)

// ocrConfig is configs/ocr.yaml with one `piccolo backend --executor ocr`
// per hardware type (in-process, over loopback gRPC) as its backends:
// cpu-2t's with two ONNX Runtime threads, the others with one.
func ocrConfig(t *testing.T) *api.Config {
	t.Helper()
	base, err := api.Load("../configs/ocr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for _, hw := range base.Hardware {
		threads := 1
		if hw.Name == "cpu-2t" {
			threads = 2
		}
		addr, _ := testharness.ServeBackend(t, testharness.OCRExecutor(t, threads))
		fmt.Fprintf(&bl, "  - {id: %s-0, address: %q, hardware: %s}\n", hw.Name, addr, hw.Name)
	}
	cfg, err := api.Load("../configs/ocr.yaml", writeTemp(t, "backends.yaml", bl.String()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// perBoxChain is the fused per-box chain of the OCR session (docs/fusion.md).
const perBoxChain = "ocr-cls+ocr-rotate+ocr-rec+ocr-ctc"

// TestFiftyPlanChangesUnderOCRLoad is make-before-break end to end on real
// ONNX Runtime: one `piccolo backend --executor ocr` per hardware type of
// configs/ocr.yaml (in-process, over loopback gRPC), a LiveSwitch serving
// the OCR session fused (its per-box chain one model) and an unfused copy of
// it side by side, and fifty plan changes while both get OCR images. Every
// change reloads the ONNX models of the per-box modules with a new max batch
// (alternating), so each backend replaces models that batches in flight, and
// fused chains between steps, still use. No request may fail with a 5xx
// other than a deadline (503 above all: the demo's "onnx model closed").
func TestFiftyPlanChangesUnderOCRLoad(t *testing.T) {
	ocrtest.RequireModels(t)
	if testing.Short() {
		t.Skip("-short: fifty plan changes on ONNX Runtime take about a minute")
	}
	cfg := ocrConfig(t)
	unfused := cfg.Sessions[0]
	unfused.Name = "ocr-unfused"
	cfg, fusions, err := planner.Fuse(cfg, testharness.Planner)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) == 0 || !usesModel(cfg.Sessions[0], perBoxChain) {
		t.Fatalf("the OCR session was not fused into %s (fusions %v); the test needs a fused chain", perBoxChain, fusions)
	}
	cfg.Sessions = append(cfg.Sessions, unfused)
	plan, err := testharness.Planner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plans := [2]*api.Plan{withBatch(t, plan, 0), withBatch(t, plan, 1)}

	sw, err := NewLiveSwitch(context.Background(), cfg, plans[0], LiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	exec, err := gateway.NewDAGRunner(sw, cfg.Sessions)
	if err != nil {
		t.Fatal(err)
	}

	images := ocrImages(t)
	stop := make(chan struct{})
	var mu sync.Mutex
	var sent, ok int
	fails := map[string][]string{} // class → first errors
	var wg sync.WaitGroup
	for _, session := range []string{cfg.Sessions[0].Name, unfused.Name} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second) // 1 image/s a session: half the planned rate
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					var resp gateway.InferResponse
					err := exec.Infer(context.Background(), session, &gateway.InferRequest{Inputs: []api.Tensor{images[i%len(images)]}}, &resp)
					mu.Lock()
					defer mu.Unlock()
					sent++
					if err == nil {
						ok++
						return
					}
					class := errorClass(err)
					if len(fails[class]) < 3 {
						fails[class] = append(fails[class], fmt.Sprintf("%s: %v", session, err))
					} else {
						fails[class] = append(fails[class], "")
					}
				}()
			}
		}()
	}
	start := time.Now()
	const changes = 50
	for i := 1; i <= changes; i++ {
		time.Sleep(100 * time.Millisecond)
		if err := sw.Apply(context.Background(), cfg, plans[i%2]); err != nil {
			t.Fatalf("plan change %d: %v", i, err)
		}
	}
	took := time.Since(start)
	time.Sleep(4 * time.Second) // the last requests finish
	close(stop)
	wg.Wait()
	t.Logf("%d plan changes in %v under OCR load (fused and unfused sessions): %d requests, %d ok", changes, took.Round(time.Millisecond), sent, ok)
	for class, errs := range fails {
		t.Logf("%s: %d, e.g. %q", class, len(errs), errs[:min(len(errs), 3)])
	}
	for _, class := range []string{"503 unavailable", "500 backend"} {
		if n := len(fails[class]); n > 0 {
			t.Errorf("%d requests failed with %s across the plan changes; want none", n, class)
		}
	}
	// Each change reloads ONNX Runtime sessions and warms them on the cores
	// the backends and the gateway share: on a loaded 2-core machine some
	// requests miss their SLO (504: 7 of 162 with load average 8, 37 of 248
	// with 11). The bound says the service kept serving through the changes.
	if ok < sent/2 {
		t.Errorf("%d of %d requests answered; want at least half", ok, sent)
	}
}

// errorClass names the HTTP status an error of DAGRunner.Infer gets at the edge.
func errorClass(err error) string {
	switch {
	case errors.Is(err, gateway.ErrUnavailable):
		return "503 unavailable"
	case errors.Is(err, gateway.ErrDeadline):
		return "504 deadline"
	case errors.Is(err, gateway.ErrOverloaded):
		return "429 overloaded"
	case errors.Is(err, gateway.ErrBadInput):
		return "400 bad input"
	}
	return "500 backend"
}

// withBatch returns a copy of plan whose modules running the per-box chain,
// ocr-cls or ocr-rec (the ONNX models after the fan-out) have their groups'
// batch raised by extra: a plan change that reloads them with a new max batch.
func withBatch(t *testing.T, plan *api.Plan, extra int) *api.Plan {
	t.Helper()
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var out api.Plan
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for i := range out.Sessions {
		for j := range out.Sessions[i].Modules {
			mp := &out.Sessions[i].Modules[j]
			if mp.Model != perBoxChain && mp.Model != "ocr-cls" && mp.Model != "ocr-rec" {
				continue
			}
			for k := range mp.Configs {
				mp.Configs[k].Batch += extra
			}
		}
	}
	return &out
}

func usesModel(s api.Session, model string) bool {
	for _, m := range s.Modules {
		if m.Model == model {
			return true
		}
	}
	return false
}

// ocrImages are the OCR test images as the session's input tensor: BYTES
// [1], a 4-byte little-endian length and the PNG.
func ocrImages(t *testing.T) []api.Tensor {
	t.Helper()
	var out []api.Tensor
	for _, s := range ocrsamples.Samples() {
		png, err := ocrsamples.EncodePNG(s)
		if err != nil {
			t.Fatal(err)
		}
		data := binary.LittleEndian.AppendUint32(nil, uint32(len(png)))
		out = append(out, api.Tensor{Name: builtin.NameImage, Datatype: "BYTES", Shape: []int64{1}, Data: append(data, png...)})
	}
	return out
}

// writeTemp writes text to name in a directory of the test's and returns its path.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
