package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
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
	ErrOverloaded = errors.New("overloaded")
	// ErrDeadline: the request's deadline (arrival + session SLO, or the client's
	// own, whichever is earlier) passed before the response was ready (HTTP 504,
	// gRPC DEADLINE_EXCEEDED).
	ErrDeadline = errors.New("deadline exceeded")
	// ErrUnavailable: no backend can run a module now (HTTP 503, gRPC UNAVAILABLE).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrBackend: a backend failed or answered something unusable (HTTP 502,
	// gRPC UNAVAILABLE).
	ErrBackend = errors.New("backend error")
)

// inputError is an ErrBadInput whose message is only the description of the
// problem, so that it reads well in {"error": "..."}.
type inputError struct{ msg string }

func (e *inputError) Error() string        { return e.msg }
func (e *inputError) Is(target error) bool { return target == ErrBadInput }

// badInput returns an error that matches ErrBadInput and says what was wrong.
func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

// HTTPStatus returns the HTTP status for err: 400, 404, 413, 429, 504, 503 or 502
// (502 for anything not recognised: a failure somewhere behind the gateway).
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrBadInput):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnknownSession):
		return http.StatusNotFound
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return 499 // client closed the request (nginx's convention)
	}
	return http.StatusBadGateway
}

// GRPCCode returns the gRPC status code for err.
func GRPCCode(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrBadInput):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnknownSession):
		return codes.NotFound
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrOverloaded):
		return codes.ResourceExhausted
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unavailable
}

// wrapBackend marks err, found in what a backend returned, as ErrBackend.
func wrapBackend(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrBackend, what, err)
}
