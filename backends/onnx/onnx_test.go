package onnx_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
)

func newExecutor(tb testing.TB, opts onnx.Options) *onnx.Executor {
	tb.Helper()
	lib, dir := ocrtest.RequireModels(tb)
	opts.Library, opts.ModelDir = lib, dir
	e, err := onnx.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func load(tb testing.TB, e *onnx.Executor, model string, batch, concurrency int) backends.Model {
	tb.Helper()
	m, err := e.Load(model, batch, concurrency)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// waitFor polls cond until it holds, failing tb after 10 s: how a test waits
// for another goroutine's batch to have started (never a sleep).
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// input returns an FP32 tensor "x" of shape [n, item...] whose values depend on
// the item index, so that items are told apart.
func input(n int, item ...int64) api.Tensor {
	shape := append([]int64{int64(n)}, item...)
	per := 1
	for _, d := range item {
		per *= int(d)
	}
	data := make([]byte, 4*n*per)
	for i := 0; i < n; i++ {
		for j := 0; j < per; j++ {
			v := float32(math.Sin(float64(j)*0.01+float64(i)*1.3)) * 2
			binary.LittleEndian.PutUint32(data[4*(i*per+j):], math.Float32bits(v))
		}
	}
	return api.Tensor{Name: "x", Datatype: "FP32", Shape: shape, Data: data}
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func TestModels(t *testing.T) {
	e := newExecutor(t, onnx.Options{})
	if diff := cmp.Diff([]string{"ocr-cls", "ocr-det", "ocr-rec"}, e.Models()); diff != "" {
		t.Errorf("Models() (-want +got):\n%s", diff)
	}
}

// TestRunShapes loads each PaddleOCR model and runs batch 1 and batch 4: the
// outputs have the documented names and shapes, probabilities are in [0, 1]
// (softmax rows sum to 1), and row i of batch 4 equals what item i gives alone.
func TestRunShapes(t *testing.T) {
	e := newExecutor(t, onnx.Options{IntraOpThreads: 2})
	cases := []struct {
		model   string
		item    []int64
		output  string
		outItem []int64
		softmax bool // rows over the last dimension sum to 1
	}{
		{"ocr-det", []int64{3, 320, 320}, "sigmoid_0.tmp_0", []int64{1, 320, 320}, false},
		{"ocr-cls", []int64{3, 48, 192}, "softmax_0.tmp_0", []int64{2}, true},
		{"ocr-rec", []int64{3, 48, 320}, "softmax_11.tmp_0", []int64{40, 6625}, true},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m := load(t, e, c.model, 4, 1)
			info := m.Info()
			if info.MaxBatch != 4 || info.Concurrency != 1 || info.Platform != onnx.Platform {
				t.Errorf("Info: max batch %d, concurrency %d, platform %q; want 4, 1, %q", info.MaxBatch, info.Concurrency, info.Platform, onnx.Platform)
			}
			if len(info.Inputs) != 1 || info.Inputs[0].Name != "x" || info.Inputs[0].Datatype != "FP32" || info.Inputs[0].Shape[0] != -1 {
				t.Errorf("Info.Inputs = %+v; want x FP32 [-1, ...]", info.Inputs)
			}
			if len(info.Outputs) != 1 || info.Outputs[0].Name != c.output {
				t.Errorf("Info.Outputs = %+v; want %s", info.Outputs, c.output)
			}
			var single [][]float32
			for _, n := range []int{1, 4} {
				in := input(n, c.item...)
				outs, err := m.Run(context.Background(), []api.Tensor{in}, n)
				if err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				if len(outs) != 1 {
					t.Fatalf("batch %d: %d outputs; want 1", n, len(outs))
				}
				out := outs[0]
				want := append([]int64{int64(n)}, c.outItem...)
				if out.Name != c.output || out.Datatype != "FP32" || !equalShape(out.Shape, want) {
					t.Fatalf("batch %d: output %s %s %v; want %s FP32 %v", n, out.Name, out.Datatype, out.Shape, c.output, want)
				}
				if err := out.Validate(); err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				vals := floats(out.Data)
				for _, v := range vals {
					if !(v >= 0 && v <= 1) {
						t.Fatalf("batch %d: value %v outside [0, 1]", n, v)
					}
				}
				if c.softmax {
					last := int(c.outItem[len(c.outItem)-1])
					for r := 0; r < len(vals); r += last {
						var s float64
						for _, v := range vals[r : r+last] {
							s += float64(v)
						}
						if math.Abs(s-1) > 1e-3 {
							t.Fatalf("batch %d: softmax row at %d sums to %v; want 1", n, r, s)
						}
					}
				}
				per := len(vals) / n
				if n == 1 {
					// Items alone, for comparison with rows of the batch.
					for i := 0; i < 4; i++ {
						one := input(4, c.item...)
						rowBytes := len(one.Data) / 4
						one = api.Tensor{Name: "x", Datatype: "FP32", Shape: append([]int64{1}, c.item...), Data: one.Data[i*rowBytes : (i+1)*rowBytes]}
						o, err := m.Run(context.Background(), []api.Tensor{one}, 1)
						if err != nil {
							t.Fatal(err)
						}
						single = append(single, floats(o[0].Data))
					}
					continue
				}
				for i := 0; i < n; i++ {
					if d := maxDiff(vals[i*per:(i+1)*per], single[i]); d > 1e-3 {
						t.Errorf("batch %d: row %d differs from item %d run alone by up to %v", n, i, i, d)
					}
				}
				if maxDiff(single[0], single[1]) == 0 {
					t.Errorf("items 0 and 1 give the same output; the test input does not tell items apart")
				}
			}
		})
	}
}

func equalShape(a, b []int64) bool { return cmp.Equal(a, b) }

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestShapesFixAndWarmUp(t *testing.T) {
	e := newExecutor(t, onnx.Options{Shapes: map[string][]int64{"ocr-cls": {3, 48, 192}}})
	m := load(t, e, "ocr-cls", 2, 2)
	if got, want := m.Info().Inputs[0].Shape, []int64{-1, 3, 48, 192}; !equalShape(got, want) {
		t.Errorf("input shape %v; want %v", got, want)
	}
	// Both lanes usable after the warm-up.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Run(context.Background(), []api.Tensor{input(2, 3, 48, 192)}, 2)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
}

func TestPassThrough(t *testing.T) {
	in := input(2, 3, 48, 192)
	extra := api.Tensor{Name: "crop", Datatype: "UINT8", Shape: []int64{2, 3}, Data: []byte{1, 2, 3, 4, 5, 6}}
	for _, pass := range []bool{false, true} {
		t.Run(fmt.Sprint("pass=", pass), func(t *testing.T) {
			e := newExecutor(t, onnx.Options{PassThrough: pass})
			m := load(t, e, "ocr-cls", 2, 1)
			outs, err := m.Run(context.Background(), []api.Tensor{in, extra}, 2)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range outs {
				got = append(got, o.Name)
			}
			want := []string{"softmax_0.tmp_0"}
			if pass {
				want = append(want, "crop")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("outputs (-want +got):\n%s", diff)
			}
			if pass {
				c := outs[1]
				if !cmp.Equal(c.Data, extra.Data) || !equalShape(c.Shape, extra.Shape) || c.Datatype != "UINT8" {
					t.Errorf("passed through %+v; want %+v", c, extra)
				}
				if &c.Data[0] == &extra.Data[0] {
					t.Errorf("passed-through data aliases the input; Run must not keep input data")
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	e := newExecutor(t, onnx.Options{})
	if _, err := e.Load("ocr-nope", 1, 1); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("Load(unknown) = %v; want ErrUnknownModel", err)
	}
	if _, err := e.Load("ocr-cls", -1, 1); !errors.Is(err, backends.ErrInvalidInput) {
		t.Errorf("Load(batch -1) = %v; want ErrInvalidInput", err)
	}
	bad := newExecutor(t, onnx.Options{Shapes: map[string][]int64{"ocr-rec": {3, 32, 320}}})
	if _, err := bad.Load("ocr-rec", 1, 1); !errors.Is(err, backends.ErrInvalidInput) {
		t.Errorf("Load(rec with height 32) = %v; want ErrInvalidInput (the model's height is 48)", err)
	}
	m := load(t, e, "ocr-cls", 2, 1)
	if info := m.Info(); info.MaxBatch != 2 {
		t.Fatalf("max batch %d; want 2", info.MaxBatch)
	}
	ctx := context.Background()
	cases := []struct {
		name   string
		inputs []api.Tensor
		n      int
	}{
		{"batch above max", []api.Tensor{input(3, 3, 48, 192)}, 3},
		{"missing input", []api.Tensor{{Name: "y", Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}, 1},
		{"wrong datatype", []api.Tensor{{Name: "x", Datatype: "FP64", Shape: []int64{1, 1, 1, 1}, Data: make([]byte, 8)}}, 1},
		{"wrong rank", []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Data: make([]byte, 16)}}, 1},
		{"wrong channels", []api.Tensor{input(1, 4, 48, 192)}, 1},
	}
	for _, c := range cases {
		if _, err := m.Run(ctx, c.inputs, c.n); err == nil {
			t.Errorf("%s: Run succeeded; want an error", c.name)
		} else if c.name != "wrong channels" && !errors.Is(err, backends.ErrInvalidInput) {
			t.Errorf("%s: %v; want ErrInvalidInput", c.name, err)
		}
	}
	if _, err := onnx.New(onnx.Options{Library: "/nonexistent/libonnxruntime.so.1", ModelDir: t.TempDir()}); err == nil {
		t.Errorf("New with an empty model dir succeeded")
	}
}

// TestCancelAndClose: a Run waiting for the lane returns ctx's error; Close while
// a Run is in flight lets it finish; later Runs get ErrClosed.
func TestCancelAndClose(t *testing.T) {
	e := newExecutor(t, onnx.Options{})
	m, err := e.Load("ocr-det", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	big := input(1, 3, 960, 960) // a few hundred ms on one thread
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(context.Background(), []api.Tensor{big}, 1)
		done <- err
	}()
	waitFor(t, "the big batch to take the lane", func() bool { return onnx.LanesFree(m) == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := m.Run(ctx, []api.Tensor{input(1, 3, 32, 32)}, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run waiting for the busy lane = %v; want context.DeadlineExceeded", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run in flight during Close = %v; want it to finish normally", err)
	}
	if _, err := m.Run(context.Background(), []api.Tensor{big}, 1); !errors.Is(err, onnx.ErrClosed) || !errors.Is(err, backends.ErrModelNotLoaded) {
		t.Errorf("Run after Close = %v; want ErrClosed and ErrModelNotLoaded", err)
	}
}

// TestCancelInFlight: a deadline that ends during the ONNX Runtime call
// terminates it; the lane is usable afterwards.
func TestCancelInFlight(t *testing.T) {
	e := newExecutor(t, onnx.Options{})
	m := load(t, e, "ocr-det", 1, 1)
	big := input(1, 3, 960, 960)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Run(ctx, []api.Tensor{big}, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want context.DeadlineExceeded", err)
	}
	full := time.Now()
	if _, err := m.Run(context.Background(), []api.Tensor{big}, 1); err != nil {
		t.Fatalf("Run after a terminated call: %v", err)
	}
	t.Logf("terminated after %v; a full run takes %v", full.Sub(start), time.Since(full))
}

// BenchmarkRun measures one batch per op of each model at its OCR shape, for
// batch sizes 1 and 4 and 1 or 2 intra-op threads; items/s is reported.
func BenchmarkRun(b *testing.B) {
	models := []struct {
		name string
		item []int64
	}{
		{"ocr-det", []int64{3, 640, 640}},
		{"ocr-cls", []int64{3, 48, 192}},
		{"ocr-rec", []int64{3, 48, 320}},
	}
	for _, threads := range []int{1, 2} {
		e := newExecutor(b, onnx.Options{IntraOpThreads: threads})
		for _, mc := range models {
			for _, n := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/threads=%d/batch=%d", mc.name, threads, n), func(b *testing.B) {
					m := load(b, e, mc.name, n, 1)
					in := []api.Tensor{input(n, mc.item...)}
					if _, err := m.Run(context.Background(), in, n); err != nil { // warm-up
						b.Fatal(err)
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if _, err := m.Run(context.Background(), in, n); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "items/s")
				})
			}
		}
	}
}

// TestDeviceLanesAcrossModels: with DeviceLanes 1, a batch of one model waits
// while another model's batch runs (the device is one lane of cores, as its
// profiles assume), though each model has a lane of its own free; the waiting
// batch gives up at its context's end.
func TestDeviceLanesAcrossModels(t *testing.T) {
	e := newExecutor(t, onnx.Options{DeviceLanes: 1})
	det, cls := load(t, e, "ocr-det", 8, 1), load(t, e, "ocr-cls", 1, 1)
	detDone := make(chan error, 1)
	go func() {
		_, err := det.Run(context.Background(), []api.Tensor{input(8, 3, 640, 640)}, 8) // about a second
		detDone <- err
	}()
	waitFor(t, "det to hold the device", func() bool { return onnx.DevicesBusy(e) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := cls.Run(ctx, []api.Tensor{input(1, 3, 48, 192)}, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cls while det runs on a one-lane device: %v; want it to wait for the device until its deadline", err)
	}
	if err := <-detDone; err != nil {
		t.Fatalf("det: %v", err)
	}
	if _, err := cls.Run(context.Background(), []api.Tensor{input(1, 3, 48, 192)}, 1); err != nil {
		t.Errorf("cls with the device free: %v", err)
	}
}
