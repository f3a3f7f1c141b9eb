// Package configs embeds the example configs, so that `piccolo demo` runs with no
// files given. Files here are also read directly with `-c configs/...`.
package configs

import "embed"

// FS holds the demo's default configs (demo/*.yaml) and the paper's examples
// (paper/*.yaml).
//
//go:embed demo/*.yaml paper/*.yaml
var FS embed.FS

// Demo lists the files of the demo's embedded default, in FS.
var Demo = []string{"demo/paper-gpus.yaml"}
