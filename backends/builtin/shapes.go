package builtin

// The OCR session's ONNX models (PP-OCR det, cls, rec), run by backends/onnx
// beside this package's Go steps.
const (
	OCRDet = "ocr-det"
	OCRCls = "ocr-cls"
	OCRRec = "ocr-rec"
)

// ONNXShapes returns the fixed input shapes, without the batch dimension, at
// which the OCR ONNX models run: the sizes o's steps pad their outputs to
// (det [3, DetSize, DetSize], cls [3, CropHeight, ClsWidth], rec [3,
// CropHeight, RecWidth]), for onnx.Options.Shapes (padding, not buckets: see
// backends/onnx). A new map each call.
func (o OCR) ONNXShapes() map[string][]int64 {
	s := int64(o.DetSize)
	return map[string][]int64{
		OCRDet: {3, s, s},
		OCRCls: {3, CropHeight, int64(o.ClsWidth)},
		OCRRec: {3, CropHeight, int64(o.RecWidth)},
	}
}
