package api

import "errors"

// The serving outcomes every layer names: defined once here, at the bottom
// of the import order, so that the dispatcher's refinements
// (dispatcher.ErrDeadline, ErrOverloaded, ErrCancelled wrap these) and the
// gateway's sentinels (gateway.ErrDeadline, ErrOverloaded, ErrCancelled are
// these) are one error to errors.Is. The edge (kserve) maps them to HTTP
// 504 / 429 / 499 and gRPC DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED /
// CANCELLED.
var (
	// ErrDeadline: a request's or item's deadline passed before it was served.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrOverloaded: admission refused a request whose deadline the queues
	// in front of it would not let it meet.
	ErrOverloaded = errors.New("overloaded")
	// ErrCancelled: an item was taken back because its request was
	// abandoned before it was sent to a backend.
	ErrCancelled = errors.New("cancelled")
)
