package api

import "errors"

// The two serving outcomes every layer names: defined once here, at the
// bottom of the import order, so that the dispatcher's refinements
// (dispatcher.ErrDeadline, dispatcher.ErrOverloaded wrap these) and the
// gateway's sentinels (gateway.ErrDeadline, gateway.ErrOverloaded are these)
// are one error to errors.Is. The edge (kserve) maps them to HTTP 504 / 429
// and gRPC DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED.
var (
	// ErrDeadline: a request's or item's deadline passed before it was served.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrOverloaded: admission refused a request whose deadline the queues
	// in front of it would not let it meet.
	ErrOverloaded = errors.New("overloaded")
)
