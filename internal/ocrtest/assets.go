// Package ocrtest is the test helper of the OCR tests: it knows where `make
// models` (scripts/fetch-models.sh) puts ONNX Runtime and the PaddleOCR v4
// models, and skips or fails a test when they are missing (RequireModels). The
// images of known text the tests read are internal/ocrsamples'.
package ocrtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/piccolo-serving/piccolo/backends/onnx"
)

// Cache returns the directory scripts/fetch-models.sh fetches into
// (onnx.Cache).
func Cache() string { return onnx.Cache() }

// Library returns where `make models` puts libonnxruntime.so.1 (onnx.DefaultLibrary).
func Library() string { return onnx.DefaultLibrary() }

// ModelDir returns where `make models` puts the OCR models and dictionary
// (onnx.DefaultModelDir).
func ModelDir() string { return onnx.DefaultModelDir() }

// Dictionary returns the path of the recognition model's character dictionary.
func Dictionary() string {
	return filepath.Join(ModelDir(), "ppocr_keys_v1.txt")
}

// RequireModels returns Library() and ModelDir() when every file is there. When
// one is missing it skips tb with a message saying how to fetch them, unless the
// environment sets PICCOLO_REQUIRE_MODELS (as `make test` does after `make
// models`): then it fails tb.
func RequireModels(tb testing.TB) (library, modelDir string) {
	tb.Helper()
	for _, f := range []string{Library(), filepath.Join(ModelDir(), "ocr-det.onnx"), filepath.Join(ModelDir(), "ocr-cls.onnx"), filepath.Join(ModelDir(), "ocr-rec.onnx"), Dictionary()} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("PICCOLO_REQUIRE_MODELS") != "" {
				tb.Fatalf("PICCOLO_REQUIRE_MODELS is set but %v; run `make models`", err)
			}
			tb.Skipf("skipped: %v; run `make models` to fetch ONNX Runtime and the OCR models (set PICCOLO_REQUIRE_MODELS=1 to fail instead)", err)
		}
	}
	return Library(), ModelDir()
}
