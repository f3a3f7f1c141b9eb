// Package builtin is the `builtin` executor of `piccolo backend`: processing
// modules written in Go that run on the CPU beside the DNN models, served through
// the same Executor interface (and so batched, dispatched and profiled like them).
//
// # OCR (PaddleOCR v4)
//
// The OCR session's DAG is pre → det → boxes → cls → rotate → rec → ctc, where
// det, cls and rec are the ONNX models of backends/onnx (ocr-det, ocr-cls,
// ocr-rec, loaded with PassThrough so that tensors they do not consume travel on)
// and the other four are modules of this package:
//
//	ocr-pre     image BYTES [n] (PNG, JPEG, GIF)
//	            → x FP32 [n,3,S,S] (det input), canvas UINT8 [n,S,S,3], scale FP32 [n,1]
//	ocr-boxes   sigmoid_0.tmp_0 FP32 [1,1,S,S], canvas (, scale)        batch 1 only
//	            → x FP32 [k,3,48,ClsWidth] (cls input), crop FP32 [k,3,48,RecWidth],
//	              crop_width INT32 [k,1], box FP32 [k,8], box_score FP32 [k,1]
//	ocr-rotate  softmax_0.tmp_0 FP32 [n,2], crop, crop_width
//	            → x FP32 [n,3,48,RecWidth] (rec input), flipped BOOL [n,1], other inputs passed on
//	ocr-ctc     softmax_11.tmp_0 FP32 [n,T,6625]
//	            → text BYTES [n], text_score FP32 [n], other inputs passed on
//
// ocr-boxes has one output row per text box found (k rows for one image): it is
// the fan-out point of the session (one cls/rec item per box).
//
// Shapes are padded, not bucketed: ocr-pre draws every image at the top left of
// an S×S canvas (S = OCR.DetSize, 640; images larger than S are scaled down,
// smaller ones are not scaled up) padded with the det mean color, and every crop
// is 48 pixels high with its content as wide as its aspect ratio gives, at most
// ClsWidth (192) or RecWidth (320) — wider text is squashed, as PaddleOCR does
// — padded right with 0. So any two items of a module stack into one batch and a
// batch's duration depends only on its size, which the planner's profiles
// assume.
//
// The steps are pure functions, usable without the executor: DecodeImage,
// Canvas, DetInput, OCR.Boxes (threshold 0.3, 8-connected components, mean score
// ≥ 0.6, minimum-area rectangle unclipped by ratio 2.0), Crop, Rotate180,
// LoadDictionary and CTCDecode (greedy). Channels are in BGR order and
// normalized as PaddleOCR's training did: det input x/255 less the mean
// (0.485, 0.456, 0.406) over the standard deviation (0.229, 0.224, 0.225), by
// channel index; cls and rec input (x/255 − 0.5)/0.5.
//
// # Concurrency
//
// An Executor is immutable after New. A loaded module runs at most
// `concurrency` calls at once (lanes; further calls wait in FIFO order) and is
// safe for concurrent use; Close has nothing to release. Outputs are freshly
// allocated and belong to the caller; inputs are read, never kept.
package builtin
