package builtin

// The OCR session's ONNX models (PP-OCR det, cls, rec), run by backends/onnx
// beside this package's Go steps.
const (
	OCRDet = "ocr-det"
	OCRCls = "ocr-cls"
	OCRRec = "ocr-rec"
)

// The OCR models' variants (docs/variants.md): the same files at a smaller
// input, so cheaper and less accurate. The det variants scale the canvas down
// before the detector and its probability map back up; the rec variants
// squeeze the crop's width, so the recognizer has fewer steps (width/8) for the
// same text.
const (
	OCRDet480 = "ocr-det-480"  // det on the canvas scaled to 480×480
	OCRDet320 = "ocr-det-320"  // det on the canvas scaled to 320×320
	OCRRec240 = "ocr-rec-w240" // rec on the crop squeezed to 48×240 (30 steps)
	OCRRec160 = "ocr-rec-w160" // rec on the crop squeezed to 48×160 (20 steps)
)

// ONNXVariant is how one variant runs: the model File runs at the item shape
// Input, resizing its input from the served shape (ONNXShapes) and, with
// Restore, its first output back (for onnx.Options.Resized).
type ONNXVariant struct {
	File    string
	Input   []int64
	Restore bool
}

// ONNXVariants returns the OCR models' variants for o's sizes. A new map each call.
func (o OCR) ONNXVariants() map[string]ONNXVariant {
	return map[string]ONNXVariant{
		OCRDet480: {File: OCRDet, Input: []int64{3, 480, 480}, Restore: true},
		OCRDet320: {File: OCRDet, Input: []int64{3, 320, 320}, Restore: true},
		OCRRec240: {File: OCRRec, Input: []int64{3, CropHeight, 240}},
		OCRRec160: {File: OCRRec, Input: []int64{3, CropHeight, 160}},
	}
}

// ONNXShapes returns the fixed input shapes, without the batch dimension, at
// which the OCR ONNX models run: the sizes o's steps pad their outputs to
// (det [3, DetSize, DetSize], cls [3, CropHeight, ClsWidth], rec [3,
// CropHeight, RecWidth]), for onnx.Options.Shapes (padding, not buckets: see
// backends/onnx); the variants are served at the shape of the file they run. A
// new map each call.
func (o OCR) ONNXShapes() map[string][]int64 {
	s := int64(o.DetSize)
	return map[string][]int64{
		OCRDet: {3, s, s},
		OCRCls: {3, CropHeight, int64(o.ClsWidth)},
		OCRRec: {3, CropHeight, int64(o.RecWidth)},
	}
}
