// Package calibrate learns how long batches really take on the live devices
// and hands the planner, admission and the simulator profiles made of those
// measurements (docs/calibration.md).
//
// An Estimator keeps one series per SeriesKey (model, hardware, batch, concurrency,
// device): the durations of the last Options.Window batches (default 64) of
// that model at that profiled batch size on that backend. A series' estimate
// is a high quantile (Options.Quantile, default 0.9) of its window's batches
// within Options.MaxAge (5s) of its latest when they are at least
// MinSamples, else of its latest MinSamples, trusted once the window holds
// Options.MinSamples (default 10). A series not observed for Options.Forget
// (10s) is dropped (a series only loaded is kept); Drift counts only what was
// measured within Options.Recent (2s) (docs/calibration.md, "Forgetting"). A batch of n items is counted
// at the profile entry that covers it (the smallest profiled batch ≥ n at its
// concurrency), its time scaled by that entry's duration over the one profiled
// for n (api.DurationAt, as the sim backend runs it), so the series line up
// with the profile's entries.
//
// Calibrate(offline) returns the config with calibrated profiles: an entry
// with a trusted series takes the lower median of the estimates over the
// devices of its hardware type (the planner plans per type, for its typical
// device; a device much slower than the others is the straggler measure's);
// an entry without one is scaled by its model's measured ratio on that type
// (the lower median over its devices of the
// quantile of the device's samples over their entries' profiled durations,
// at batch sizes from half the largest measured there up), else by the
// type's largest ratio over its models, else (a type nothing measured) by
// the smallest ratio of the measured types. Drift(offline, plan)
// compares the calibrated durations of the plan's groups with the plan's.
//
// Merge(options, calibrations...) is the cluster's elected re-planner's view
// of every gateway's calibration (Marshal's output, in Consul KV): per
// series key, the series with the newest batch.
//
// Contract: Observe is called by the data plane once per batch (dataplane's
// liveModule.observe), from the batch's goroutine, with how long the batch
// ran on its device (the compute time the backend reported, else the call
// less a wait behind another batch there); it
// takes the Estimator's lock for a map lookup and a ring write, and
// allocates only when a series is new (BenchmarkObserve: about 80 ns, no
// allocation). Everything else (SetOffline, Calibrate, Drift, Colocations,
// Snapshot, Marshal, Unmarshal, Merge, Save, Load) runs on the control path, from any
// goroutine. The Estimator never calls out. Configs and plans handed in are
// not modified; Calibrate returns a copy.
package calibrate
