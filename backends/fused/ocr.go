package fused

// OCRChains are the fused chains of the OCR session (docs/fusion.md) that
// `piccolo backend --executor ocr` lists: pre+det (the 6 MB det input stays
// in the process), pre+det+boxes (so does the probability map; it fans out
// like ocr-boxes) and the per-box chain cls+rotate+rec+ctc (the crops and the
// 40×6625 recognizer output stay in the process). Any other chain of its
// models loads too.
func OCRChains() []string {
	return []string{
		Name("ocr-pre", "ocr-det"),
		Name("ocr-pre", "ocr-det", "ocr-boxes"),
		Name("ocr-cls", "ocr-rotate", "ocr-rec", "ocr-ctc"),
	}
}
