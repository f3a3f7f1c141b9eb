// Package calibrate learns how long batches really take on the live devices
// and hands the planner, admission and the simulator profiles made of those
// measurements (docs/calibration.md).
//
// An Estimator keeps one series per Key (model, hardware, batch, concurrency,
// device): the durations of the last Options.Window batches (default 64) of
// that model at that profiled batch size on that backend. A series' estimate
// is a high quantile of its window (Options.Quantile, default 0.9), trusted
// once it holds Options.MinSamples (default 16). A batch of n items is counted
// at the profile entry that covers it (the smallest profiled batch ≥ n at its
// concurrency, as the sim backend runs it), so the series line up with the
// profile's entries.
//
// Calibrate(cfg) returns cfg with calibrated profiles: an entry with a trusted
// series takes the largest estimate over the devices of its hardware type
// (the planner plans per type, so the slowest device of a type is the one a
// plan must survive); an entry without one is scaled by its model's measured
// ratio on that type (estimate over profile, the largest over its measured
// entries), else by the type's ratio over all its models, else kept. Drift
// compares the calibrated profile with the one a plan was made from.
//
// Contract: Observe is called by the data plane once per batch that ran
// without queueing behind another dispatcher's batch (dataplane's
// liveModule.observe), from the batch's goroutine; it takes the Estimator's
// lock for a map lookup and a ring write, and allocates only when a series is
// new. Everything else (SetOffline, Calibrate, Drift, Snapshot, Save, Load)
// runs on the control path, from any goroutine. The Estimator never calls
// out. Configs handed in are not modified; Calibrate returns a copy.
//
// Co-location: Key.Device is the backend id, so a model's series on a device
// it shares measures it as it runs there, beside whatever else the plan put
// on that device; Interference compares those with the same model's series
// on devices it has alone.
package calibrate
