// Package configs embeds the example configs, so that `piccolo demo` runs with no
// files given. Files here are also read directly with `-c configs/...`.
package configs

import "embed"

// FS holds the demo's default configs (demo/*.yaml, ocr.yaml,
// ocr-variants.yaml), the paper's examples (paper/*.yaml) and its five
// applications (paper/apps/*.yaml, the evaluation's: docs/evaluation.md) with
// its other GPU pools (paper/pools/*.yaml).
//
//go:embed demo/*.yaml paper/*.yaml paper/apps/*.yaml paper/pools/*.yaml ocr.yaml ocr-variants.yaml
var FS embed.FS

// Demo lists the files of the demo's embedded default, in FS: the OCR session on
// real ONNX Runtime CPU backends, the paper's chain on simulated GPUs, and the
// OCR session with model variants at an accuracy target. The variant session
// comes last so that the other sessions keep their indexes, and with them the
// arrival streams the demo's headroom search simulates (simulate.PlanForBursts).
var Demo = []string{"ocr.yaml", "demo/paper-gpus.yaml", "ocr-variants.yaml"}
