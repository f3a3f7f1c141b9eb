package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/scheduler"
)

// addFusionFlag adds --no-fusion (plan, gateway, demo): plan every module as
// configured, never a fused chain (docs/fusion.md).
func addFusionFlag(f *pflag.FlagSet, noFuse *bool) {
	f.BoolVar(noFuse, "no-fusion", false, "never fuse a chain of modules into one stage, even where a fused profile plans cheaper (docs/fusion.md)")
}

// fuseConfig applies the planner's fusion decision (scheduler.Fuse) to cfg and
// names each fusion made on w.
func fuseConfig(cfg *api.Config, plan func(*api.Config) (*api.Plan, error), w io.Writer) (*api.Config, error) {
	out, fusions, err := scheduler.Fuse(cfg, plan)
	if err != nil {
		return nil, err
	}
	for _, f := range fusions {
		fmt.Fprintln(w, f)
	}
	return out, nil
}
