// Package evaluation regenerates the paper's evaluation (§IV) on its five
// applications: `piccolo bench paper` and `make eval` (docs/evaluation.md).
//
// Apps loads the applications (configs/paper/apps, embedded). Generate draws
// the workloads of §IV-A from them: one application each, random rates and a
// random SLO. Run plans every workload with every policy, baseline, ablation
// of Fig. 5 and the optimum, all under one utilization cap, and simulates every
// plan (simulate.Run, Poisson arrivals, each policy's own dispatch): a plan whose
// simulated SLO attainment is below the target is a miss and never enters a cost
// comparison; with Options.InferLineEvery it also runs the project's InferLine
// planner (simulate.PlanInferLine) on every k-th workload. Figures turns a
// Result into the data of Figs. 4a–11 and of the planner's runtime against the
// brute force; Write writes one CSV and one PNG per figure; Summary prints each figure's summary beside the
// paper's; TableII recomputes the paper's Table II. Footing holds any config's
// sessions to the gateway's headroom rule (ServingOptions) for every policy;
// Baseline is the round-robin baseline `piccolo demo` prints beside its plan.
// Tuning compares how InferLine's tuner, the control loop's rate re-plan and
// coarse-grained tuning follow a changing rate (a step, a diurnal ramp): each
// one's decisions made on the virtual clock from the arrivals, then simulated
// as plan switches (docs/traffic.md, "The tuner, simulated").
//
// Run spreads workloads over Options.Workers goroutines (each workload's
// outcomes depend on its own seed only, so the numbers do not change) and
// calls progress (if not nil) after each workload, one call at a time;
// everything else runs on the caller's goroutine. Results are plain values,
// immutable once returned.
package evaluation
