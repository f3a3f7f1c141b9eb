package onnx

import "github.com/piccolo-serving/piccolo/backends"

// DevicesBusy returns how many of e's device lanes hold a batch now: tests
// wait for it instead of sleeping until a batch has surely started.
func DevicesBusy(e *Executor) int { return len(e.device) }

// LanesFree returns how many of m's lanes (a model e.Load returned) are free now.
func LanesFree(m backends.Model) int { return len(m.(*onnxModel).lanes) }
