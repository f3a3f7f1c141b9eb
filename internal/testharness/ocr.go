package testharness

import (
	"testing"

	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/builtin"
	"github.com/piccolo-serving/piccolo/backends/fused"
	"github.com/piccolo-serving/piccolo/backends/onnx"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
)

// OCRExecutor is what `piccolo backend --executor ocr --intra-op-threads
// threads` serves: the builtin OCR steps and the ONNX models in one Union,
// the OCR chains fused (fused.OCRChains). It skips tb when the models are
// missing (ocrtest.RequireModels).
func OCRExecutor(tb testing.TB, threads int) *fused.Executor {
	tb.Helper()
	lib, dir := ocrtest.RequireModels(tb)
	b, err := builtin.New(builtin.Options{Dictionary: ocrtest.Dictionary()})
	if err != nil {
		tb.Fatal(err)
	}
	x, err := onnx.New(onnx.Options{Library: lib, ModelDir: dir, IntraOpThreads: threads, PassThrough: true, Shapes: b.OCR().ONNXShapes()})
	if err != nil {
		tb.Fatal(err)
	}
	u, err := backends.NewUnion(b, x)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := fused.New(u, fused.OCRChains()...)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
