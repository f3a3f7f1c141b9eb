package gateway

import (
	"errors"
	"fmt"

	"github.com/piccolo-serving/piccolo/api"
)

// Sentinel errors callers branch on. Every error the gateway returns wraps exactly one
// of them (or a context error); HTTPStatus and GRPCCode map them once, at the edge.
var (
	// ErrBadInput: the request is malformed or does not fit the session (HTTP 400,
	// gRPC INVALID_ARGUMENT). The message names what was wrong and what is allowed.
	ErrBadInput = errors.New("bad input")
	// ErrUnknownSession: no session of that name (HTTP 404, gRPC NOT_FOUND).
	ErrUnknownSession = errors.New("unknown session")
	// ErrTooLarge: the request body is over the configured limit (HTTP 413,
	// gRPC RESOURCE_EXHAUSTED).
	ErrTooLarge = errors.New("request too large")
	// ErrOverloaded: admission control rejected the request because its deadline
	// cannot be met given the current queue (HTTP 429, gRPC RESOURCE_EXHAUSTED).
	// It is api.ErrOverloaded, which dispatcher.ErrOverloaded wraps.
	ErrOverloaded = api.ErrOverloaded
	// ErrDeadline: the request's deadline (arrival + session SLO, or the client's
	// own, whichever is earlier) passed before the response was ready (HTTP 504,
	// gRPC DEADLINE_EXCEEDED). It is api.ErrDeadline, which
	// dispatcher.ErrDeadline wraps.
	ErrDeadline = api.ErrDeadline
	// ErrUnavailable: no backend can run a module now (HTTP 503, gRPC UNAVAILABLE).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrBackend: a backend failed or answered something unusable (HTTP 502,
	// gRPC UNAVAILABLE).
	ErrBackend = errors.New("backend error")
	// ErrCancelled: the item was taken back because its request was abandoned
	// (Call.Abandoned) before it was sent to a backend. A client never sees
	// it: its request has already returned (HTTP 499, gRPC CANCELLED, as
	// context.Canceled). It is api.ErrCancelled, which
	// dispatcher.ErrCancelled wraps.
	ErrCancelled = api.ErrCancelled
	// ErrInternal: a panic was recovered while serving the request, a bug in
	// the gateway (HTTP 500, gRPC INTERNAL). It is api.ErrInternal, which
	// api.Recovered returns.
	ErrInternal = api.ErrInternal
)

// publicError matches one sentinel and has a message written for the client:
// what was wrong with the request and what is allowed, from what the client
// sent and the session's public metadata; never a backend's address, a
// process or a wrapped error's text that came from behind the gateway.
type publicError struct {
	sentinel error
	msg      string
}

func (e *publicError) Error() string        { return e.msg }
func (e *publicError) Is(target error) bool { return target == e.sentinel }

// BadInput returns an error that matches ErrBadInput and says what was wrong.
// Its message goes to the client as is (PublicMessage): it must be made of
// what the client sent and the session's metadata only.
func BadInput(format string, args ...any) error {
	return &publicError{sentinel: ErrBadInput, msg: fmt.Sprintf(format, args...)}
}

// Public returns an error that matches sentinel with a message for the client,
// under the same rule as BadInput's.
func Public(sentinel error, format string, args ...any) error {
	return &publicError{sentinel: sentinel, msg: fmt.Sprintf(format, args...)}
}

// PublicMessage returns the message of the first error in err's chain made by
// BadInput or Public (the context that wraps it is dropped: it may name
// backends), and false when there is none.
func PublicMessage(err error) (string, bool) {
	var p *publicError
	if errors.As(err, &p) {
		return p.msg, true
	}
	return "", false
}

// WrapBackend marks err, found in what a backend returned, as ErrBackend.
func WrapBackend(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrBackend, what, err)
}
