package fused_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/fused"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// ocrExecutor is what `piccolo backend --executor ocr` serves: builtin and onnx
// in one process, with the OCR chains fused.
func ocrExecutor(tb testing.TB) *fused.Executor {
	tb.Helper()
	return testharness.OCRExecutor(tb, 1)
}

func load(tb testing.TB, e backends.Executor, name string, batch int) backends.Model {
	tb.Helper()
	m, err := e.Load(name, batch, 1)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

func run(tb testing.TB, m backends.Model, in []api.Tensor, n int) []api.Tensor {
	tb.Helper()
	out, err := m.Run(context.Background(), in, n)
	if err != nil {
		tb.Fatalf("%s: %v", m.Info().Name, err)
	}
	return out
}

// chain runs the models one after the other, as the gateway does over gRPC.
func chain(tb testing.TB, in []api.Tensor, n int, ms ...backends.Model) []api.Tensor {
	for _, m := range ms {
		in = run(tb, m, in, n)
	}
	return in
}

func sameTensors(t *testing.T, what string, got, want []api.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Datatype != w.Datatype || !equalShape(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("%s: output %d: got %s %s %v (%d bytes), want %s %s %v (%d bytes), or their data differ",
				what, i, g.Name, g.Datatype, g.Shape, len(g.Data), w.Name, w.Datatype, w.Shape, len(w.Data))
		}
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFusedOCRSameOutputs runs a real OCR image through the fused chains
// (pre+det, cls+rotate+rec+ctc) and through the same models one by one, and
// wants the same tensors, byte for byte, and the right text.
func TestFusedOCRSameOutputs(t *testing.T) {
	e := ocrExecutor(t)
	s := ocrsamples.Samples()[0]
	png, err := ocrsamples.EncodePNG(s)
	if err != nil {
		t.Fatal(err)
	}
	img := api.Tensor{Name: builtin.NameImage, Datatype: "BYTES", Shape: []int64{1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(len(png)))}
	img.Data = append(img.Data, png...)
	in := []api.Tensor{img}

	pre, det := load(t, e, builtin.OCRPre, 1), load(t, e, "ocr-det", 1)
	preDet := load(t, e, "ocr-pre+ocr-det", 1)
	if info := preDet.Info(); info.Name != "ocr-pre+ocr-det" || info.MaxBatch != 1 || info.FanOut || len(info.Inputs) != len(pre.Info().Inputs) {
		t.Errorf("ocr-pre+ocr-det Info = %+v", info)
	}
	want := chain(t, in, 1, pre, det)
	got := run(t, preDet, in, 1)
	sameTensors(t, "ocr-pre+ocr-det", got, want)

	boxes := run(t, load(t, e, builtin.OCRBoxes, 1), want, 1)
	k := int(boxes[0].Shape[0])
	if k == 0 {
		t.Fatal("ocr-boxes found no text in the sample")
	}
	// The pre+det+boxes chain ends in the fan-out step: it fans out too.
	pdb := load(t, e, "ocr-pre+ocr-det+ocr-boxes", 1)
	if !pdb.Info().FanOut {
		t.Error("ocr-pre+ocr-det+ocr-boxes: FanOut false, want true (its last step fans out)")
	}
	sameTensors(t, "ocr-pre+ocr-det+ocr-boxes", run(t, pdb, in, 1), boxes)

	const perBox = "ocr-cls+ocr-rotate+ocr-rec+ocr-ctc"
	steps := []backends.Model{load(t, e, "ocr-cls", 8), load(t, e, builtin.OCRRotate, 8), load(t, e, "ocr-rec", 8), load(t, e, builtin.OCRCTC, 8)}
	fusedBox := load(t, e, perBox, 8)
	if fusedBox.Info().MaxBatch != 8 {
		t.Errorf("%s: MaxBatch %d, want 8", perBox, fusedBox.Info().MaxBatch)
	}
	wantText := chain(t, boxes, k, steps...)
	gotText := run(t, fusedBox, boxes, k)
	sameTensors(t, perBox, gotText, wantText)
	var text api.Tensor
	for _, o := range gotText {
		if o.Name == builtin.NameText {
			text = o
		}
	}
	if text.Shape == nil || text.Shape[0] != int64(k) || !bytes.Contains(text.Data, []byte(s.Words()[0])) {
		t.Errorf("%s: text %v %q, want %d lines with %q", perBox, text.Shape, text.Data, k, s.Words()[0])
	}
}

// TestFusedLoadErrors: a fan-out step before the last, an unknown step or a
// one-model chain is refused with the sentinel the Server maps.
func TestFusedLoadErrors(t *testing.T) {
	e := ocrExecutor(t)
	for name, want := range map[string]error{
		"ocr-boxes+ocr-cls":   backends.ErrInvalidInput,
		"ocr-pre+ocr-nothing": backends.ErrUnknownModel,
		"ocr-pre+":            backends.ErrUnknownModel,
	} {
		if m, err := e.Load(name, 1, 1); !errors.Is(err, want) {
			if m != nil {
				m.Close()
			}
			t.Errorf("Load(%q): %v, want %v", name, err, want)
		}
	}
	b, err := builtin.New(builtin.Options{Dictionary: ocrtest.Dictionary()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fused.New(b, "ocr-pre"); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("New with chain %q: %v, want ErrUnknownModel", "ocr-pre", err)
	}
}

// TestWriteOCRImages writes the OCR test images (PNG only) into the directory
// $PICCOLO_OCR_IMAGES for scripts/fusion-compare.sh's load; without it, it
// has nothing to do.
func TestWriteOCRImages(t *testing.T) {
	dir := os.Getenv("PICCOLO_OCR_IMAGES")
	if dir == "" {
		t.Skip("PICCOLO_OCR_IMAGES not set: no directory to write the OCR test images to")
	}
	for _, s := range ocrsamples.Samples() {
		png, err := ocrsamples.EncodePNG(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFusedChainReloadUnderLoad is the demo's failure "batch of 2: step
// ocr-rec: onnx model closed" on real ONNX Runtime: the per-box chain is
// reloaded with new settings (what a plan change asks of a backend) while
// batches run on it through a Server over gRPC. Every batch must succeed:
// the chain replaced is closed only after its last batch returns.
func TestFusedChainReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: reloads ONNX Runtime sessions for a few seconds")
	}
	e := ocrExecutor(t)
	const perBox = "ocr-cls+ocr-rotate+ocr-rec+ocr-ctc"
	boxes := sampleBoxes(t, e)
	addr, _ := testharness.ServeBackend(t, e)
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Load(ctx, perBox, 8, 1); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var batches, failed atomic.Int64
	var firstErr atomic.Value
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.Infer(ctx, perBox, [][]api.Tensor{boxes})
				batches.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	const reloads = 10
	for i := range reloads {
		for b, deadline := batches.Load(), time.Now().Add(30*time.Second); batches.Load() == b; { // a batch in every step
			if time.Now().After(deadline) {
				t.Fatalf("reload %d: no batch answered in 30s", i)
			}
			time.Sleep(time.Millisecond)
		}
		if err := c.Load(ctx, perBox, 8, 1+(i+1)%2); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reloads of %s (concurrency 1 ↔ 2) under 3 senders: %d batches, %d failed", reloads, perBox, batches.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d of %d batches failed across the reloads, first: %v; want none", failed.Load(), batches.Load(), firstErr.Load())
	}
}

// sampleBoxes returns the per-box chain's input for the first test image:
// what ocr-pre+ocr-det+ocr-boxes makes of it (k ≤ 8 rows).
func sampleBoxes(t *testing.T, e *fused.Executor) []api.Tensor {
	t.Helper()
	png, err := ocrsamples.EncodePNG(ocrsamples.Samples()[0])
	if err != nil {
		t.Fatal(err)
	}
	img := api.Tensor{Name: builtin.NameImage, Datatype: "BYTES", Shape: []int64{1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(len(png)))}
	img.Data = append(img.Data, png...)
	boxes := run(t, load(t, e, "ocr-pre+ocr-det+ocr-boxes", 1), []api.Tensor{img}, 1)
	if k := boxes[0].Shape[0]; k < 1 || k > 8 {
		t.Fatalf("ocr-boxes found %d boxes in the sample; want 1 to 8", k)
	}
	return boxes
}
