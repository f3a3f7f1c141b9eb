// Package sim is the `sim` executor of `piccolo backend`: it emulates one
// hardware type from the profiles in the config, so a whole cluster of GPUs can
// be served on a laptop with the timing the planner assumes.
//
// A model is loaded with a max batch b and a concurrency c (RepositoryModelLoad
// parameters "batch" and "concurrency"; default: the largest profiled entry).
// A batch of n ≤ b items then takes the profiled duration linear between
// the profiled batches around n at concurrency c (api.DurationAt: the
// project's one model of a partial batch, which the calibration and the
// evaluation's charge use too; below the smallest profiled batch, its
// duration), times an optional seeded jitter
// factor in [1-J, 1+J]. At most c batches of a model run at once (c lanes);
// further batches wait for a lane in FIFO order.
//
// One Sim is one device. Placement packs the fractional machines of several
// modules onto one device (placement.Place), so every model loaded on
// a Sim shares ONE set of device lanes, as many as the largest concurrency any
// of them was loaded with: a batch runs when it holds a lane of its model and
// a lane of the device, so two models' batches on one device queue behind each
// other. The profile's duration at concurrency c is a batch's duration when c
// batches run at once, whatever their models: we do not model spatial
// multiplexing faster than that (a device never runs more batches at once than
// its largest concurrency).
//
// Tensors: a sim model declares input0 FP32 [-1, -1] and accepts any other
// inputs too (an upstream module's outputs pass straight through). It answers
// output0 FP32 [n, 1] whose row i is Checksum of row i of every input, so a test
// can tell that item i's output came from item i's input; it declares no other
// output. A fan-out model (Options.FanOut: a detector that finds 0 to 12
// objects an image) runs one item a call (max batch 1, Info.FanOut) in batch
// 1's profiled time and answers output0 FP32 [k, 1]: k drawn from its
// distribution by a hash of the item's Checksum (the same input, the same
// k), row j the Checksum plus j modulo 2^24.
//
// Sim's configuration is immutable after New; loaded models are safe for
// concurrent Run.
package sim
