package main

import "github.com/spf13/pflag"

// addFusionFlag adds --no-fusion (plan, gateway, demo): plan every module as
// configured, never a fused chain (docs/fusion.md).
func addFusionFlag(f *pflag.FlagSet, noFuse *bool) {
	f.BoolVar(noFuse, "no-fusion", false, "never fuse a chain of modules into one stage, even where a fused profile plans cheaper (docs/fusion.md)")
}
