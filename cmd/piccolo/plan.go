package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
)

func newPlanCmd() *cobra.Command {
	var (
		files    []string
		opts     planner.Options
		burst    float64
		output   string
		dispatch string
		// --session-utilization: session name → cap (sessionCaps)
		sessionUtil map[string]string
		tf          simulate.Traffic
		noFuse      bool
		// --against: dry runs on a running gateway (plan_against.go)
		against, token string
	)
	cmd := &cobra.Command{
		Use:   "plan -c FILE...",
		Short: "Plan sessions at minimum cost within their SLOs and print the plan",
		Long: `plan reads the config files (hardware, profiles, sessions, backends), plans every
session with the chosen policy as ` + "`piccolo gateway`" + ` would serve it on the same files
(the burst check's headroom, the backends listed as the pool) and prints the plan: a table by default, the plan JSON (api.Plan)
with -o json. A session that cannot meet its SLO is reported on stderr
with the fastest latency it could reach; the others are still planned, and the
command exits 1.

Policies: piccolo (default: TC dispatch with one batch stream per config group,
headroom 0.8), paper (Piccolo as published), nexus, scrooge, inferline, clipper
(the paper's baselines, Table III) and optimal (brute force under --reference's
latency model).

--trace FILE plans for recorded request arrivals (docs/traffic.md): the cheapest
plan whose simulated SLO attainment on the trace reaches --attainment, printed
with, on stderr, its cost beside the mean-rate plan's and peak provisioning's.
--arrival mmpp|gamma|poisson --duration D does the same for a synthetic process.

--against URL plans nothing here: it sends each session of the files to the
gateway at URL as a dry run (PUT /admin/sessions/{name}?dry_run=true, with the
admin token: --admin-token or $PICCOLO_ADMIN_TOKEN) and prints what each would
change there, planned by the gateway on its pool and calibrated profiles: the
cost before and after, machines per hardware type, each module's configs, and
why it would be refused (the command then exits 1). Nothing changes on the
gateway (docs/operations.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: allowed: table, json", output)
			}
			if len(files) == 0 {
				return fmt.Errorf("no config given: pass -c FILE (repeatable)")
			}
			if against != "" {
				return planAgainst(cmd.OutOrStdout(), against, adminToken(token), files, output)
			}
			cfg, err := api.Load(files...)
			if err != nil {
				return err
			}
			if opts.SessionUtilization, err = sessionCaps(sessionUtil, opts.MaxUtilization); err != nil {
				return err
			}
			if err := planner.CheckSessionUtilization(cfg, opts.SessionUtilization); err != nil {
				return fmt.Errorf("--session-utilization %w", err)
			}
			var plan *api.Plan
			var planErr error
			if tf.Planning() {
				planner := tf.Planner(cmd.ErrOrStderr())
				pl := func(c *api.Config) (*api.Plan, error) { return planner(c, opts) }
				if !noFuse {
					if cfg, err = serving.Fuse(cfg, pl, cmd.ErrOrStderr()); err != nil {
						return err
					}
				}
				plan, planErr = pl(cfg)
			} else {
				// The plan a gateway started on the same files serves
				// (serving.Served; TestPlanIsServed).
				pol, err := dispatcher.ParsePolicy(dispatch)
				if err != nil {
					return err
				}
				flush, err := dispatcher.ParseFlush(tf.Flush)
				if err != nil {
					return fmt.Errorf("--flush: %w", err)
				}
				_, plan, planErr = serving.Served(cfg, serving.Options{Scheduler: opts, BurstTarget: burst, Dispatch: pol, Flush: flush}, noFuse, cmd.ErrOrStderr())
			}
			if plan == nil {
				return planErr
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(plan); err != nil {
					return err
				}
			} else {
				devices := -1
				if placed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true}); err == nil {
					devices = placement.Devices(placed)
				}
				plan.WriteTable(cmd.OutOrStdout(), devices)
			}
			return planErr
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "config", "c", nil, "config file (repeatable; files are merged)")
	f.StringVar(&opts.Policy, "policy", "piccolo", "planning policy: "+strings.Join(planner.Policies, ", "))
	f.BoolVar(&opts.NoDummy, "no-dummy", false, "disable the dummy generator (§III-D)")
	f.BoolVar(&opts.NoReassign, "no-reassign", false, "do not reassign the remaining latency budget (§III-C)")
	f.BoolVar(&opts.ReassignOnce, "reassign-once", false, "reassign the remaining budget to one module only (Picc-1re)")
	f.IntVar(&opts.MaxConfigs, "max-configs", 0, "at most N distinct configs per module (0: the policy's own bound)")
	f.Float64Var(&opts.MaxUtilization, "max-utilization", 0, "size machines to run at most this share of their throughput, in (0,1] (0: choose it by simulation, as the gateway does, see --burst-target)")
	f.StringToStringVar(&sessionUtil, "session-utilization", nil, "with --max-utilization, SESSION=U plans that session at cap U in (0,1] instead (repeatable or comma-separated), as the burst check chooses per session and the gateway takes it")
	f.StringVar(&dispatch, "dispatch", "tc", "the dispatch the gateway serves with (its --dispatch), which the burst check simulates: "+dispatcher.Policies)
	f.Float64Var(&burst, "burst-target", serving.DefaultBurstTarget, "with --max-utilization 0: the share of simulated Poisson requests that must meet the SLO; the planner lowers utilisation until they do")
	f.StringVar(&opts.Model, "model", "", "override the latency model: "+planner.BuiltinModels().String())
	f.StringVar(&opts.Split, "split", "", "override the latency split: "+planner.BuiltinSplits().String())
	f.DurationVar(&opts.Quantum, "quantum", 0, "step of a quantized split (default 10ms)")
	f.BoolVar(&opts.NoBatching, "no-batching", false, "plan with batch size 1 only")
	f.BoolVar(&opts.NoMultiplexing, "no-multiplexing", false, "plan with concurrency 1 only")
	f.BoolVar(&opts.SingleHardware, "single-hardware", false, "plan each session on the one hardware type that is cheapest")
	f.StringVar(&opts.Hardware, "hardware", "", "plan on this hardware type only")
	f.StringVar(&opts.Reference, "reference", "", "for --policy optimal: the policy whose latency model the brute force uses (default piccolo)")
	f.StringVar(&opts.VariantSearch, "variant-search", "", "how to choose model variants: climb (default: every combination up to 256, else beam then single changes), beam (JellyBean) or all")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.StringVar(&against, "against", "", "dry-run the files' sessions on the gateway at this URL (http://host:port) and print the diff against its running plan")
	f.StringVar(&token, "admin-token", "", "with --against: the gateway's admin token (default: $PICCOLO_ADMIN_TOKEN)")
	addPlanFlags(f, &tf)
	addFusionFlag(f, &noFuse)
	return cmd
}
