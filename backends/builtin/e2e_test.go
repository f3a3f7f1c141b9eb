package builtin_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
	"github.com/piccolo-serving/piccolo/profiler"
)

// pipeline is the OCR session's modules loaded on their executors, run in DAG
// order by hand: pre → det → boxes → cls → rotate → rec → ctc.
type pipeline struct {
	pre, det, boxes, cls, rotate, rec, ctc backends.Model
}

func newPipeline(tb testing.TB, threads int) *pipeline {
	tb.Helper()
	lib, dir := ocrtest.RequireModels(tb)
	b, err := builtin.New(builtin.Options{Dictionary: ocrtest.Dictionary()})
	if err != nil {
		tb.Fatal(err)
	}
	o := b.OCR()
	x, err := onnx.New(onnx.Options{
		Library: lib, ModelDir: dir, IntraOpThreads: threads, PassThrough: true,
		Shapes: o.ONNXShapes(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	load := func(e backends.Executor, name string, batch int) backends.Model {
		m, err := e.Load(name, batch, 1)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { m.Close() })
		return m
	}
	return &pipeline{
		pre: load(b, builtin.OCRPre, 1), det: load(x, "ocr-det", 1), boxes: load(b, builtin.OCRBoxes, 1),
		cls: load(x, "ocr-cls", 8), rotate: load(b, builtin.OCRRotate, 8), rec: load(x, "ocr-rec", 8), ctc: load(b, builtin.OCRCTC, 8),
	}
}

// Line is one text line read, with its box corners in image pixels.
type Line struct {
	Text    string
	Flipped bool
	Box     [8]float32
}

func (p *pipeline) read(ctx context.Context, png []byte) ([]Line, error) {
	img := api.Tensor{Name: builtin.NameImage, Datatype: "BYTES", Shape: []int64{1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(len(png)))}
	img.Data = append(img.Data, png...)
	pre, err := p.pre.Run(ctx, []api.Tensor{img}, 1)
	if err != nil {
		return nil, fmt.Errorf("pre: %w", err)
	}
	det, err := p.det.Run(ctx, pre, 1) // passes canvas and scale through
	if err != nil {
		return nil, fmt.Errorf("det: %w", err)
	}
	boxes, err := p.boxes.Run(ctx, det, 1)
	if err != nil {
		return nil, fmt.Errorf("boxes: %w", err)
	}
	k := int(boxes[0].Shape[0])
	var lines []Line
	// The gateway fans out one item per box and the dispatcher batches them;
	// here the boxes run in batches of up to 8.
	for lo := 0; lo < k; lo += 8 {
		n := min(8, k-lo)
		items := rows(boxes, lo, lo+n)
		cls, err := p.cls.Run(ctx, items, n) // passes crop, crop_width, box, box_score
		if err != nil {
			return nil, fmt.Errorf("cls: %w", err)
		}
		rot, err := p.rotate.Run(ctx, cls, n)
		if err != nil {
			return nil, fmt.Errorf("rotate: %w", err)
		}
		rec, err := p.rec.Run(ctx, rot, n)
		if err != nil {
			return nil, fmt.Errorf("rec: %w", err)
		}
		out, err := p.ctc.Run(ctx, rec, n)
		if err != nil {
			return nil, fmt.Errorf("ctc: %w", err)
		}
		texts := strs(find(out, builtin.NameText))
		flipped := find(out, builtin.NameFlipped).Data
		box := find(out, builtin.NameBox).Data
		for i := 0; i < n; i++ {
			l := Line{Text: texts[i], Flipped: flipped[i] != 0}
			for j := range l.Box {
				l.Box[j] = math.Float32frombits(binary.LittleEndian.Uint32(box[4*(8*i+j):]))
			}
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// rows returns rows [lo, hi) of every tensor (fixed-size datatypes).
func rows(ts []api.Tensor, lo, hi int) []api.Tensor {
	out := make([]api.Tensor, len(ts))
	for i, t := range ts {
		per := len(t.Data) / int(t.Shape[0])
		shape := append([]int64{int64(hi - lo)}, t.Shape[1:]...)
		out[i] = api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: t.Data[lo*per : hi*per]}
	}
	return out
}

func find(ts []api.Tensor, name string) *api.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

func strs(t *api.Tensor) []string {
	var out []string
	for off := 0; off < len(t.Data); {
		l := int(binary.LittleEndian.Uint32(t.Data[off:]))
		out = append(out, string(t.Data[off+4:off+4+l]))
		off += 4 + l
	}
	return out
}

// TestOCREndToEnd reads every image of the test set through the real models and
// the Go processing steps and checks the exact-match word accuracy (≥ 90%).
func TestOCREndToEnd(t *testing.T) {
	p := newPipeline(t, 2)
	samples := ocrsamples.Samples()
	total, matched, exactImages := 0, 0, 0
	flips := 0
	for _, s := range samples {
		png, err := ocrsamples.EncodePNG(s)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := p.read(context.Background(), png)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		var got []string
		var texts []string
		for _, l := range lines {
			got = append(got, strings.Fields(l.Text)...)
			texts = append(texts, l.Text)
			if l.Flipped {
				flips++
			}
		}
		want := s.Words()
		m := profiler.WordAccuracy(want, got)
		total += len(want)
		matched += m
		if m == len(want) && len(got) == len(want) {
			exactImages++
		} else {
			t.Logf("%s: want %q, read %q", s.Name, s.Lines, texts)
		}
	}
	acc := float64(matched) / float64(total)
	t.Logf("OCR test set: %d images, word accuracy %d/%d = %.1f%%, images read exactly %d/%d, crops turned over %d",
		len(samples), matched, total, 100*acc, exactImages, len(samples), flips)
	fmt.Printf("OCR word accuracy: %.1f%% (%d/%d words, %d/%d images exact)\n", 100*acc, matched, total, exactImages, len(samples))
	if acc < 0.9 {
		t.Errorf("word accuracy %.1f%%; want ≥ 90%%", 100*acc)
	}
}

// BenchmarkOCR reads one test image (two lines) per op through every step, on
// 1 and 2 intra-op threads.
func BenchmarkOCR(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := newPipeline(b, threads)
			png, err := ocrsamples.EncodePNG(ocrsamples.Samples()[8])
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := p.read(context.Background(), png); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
