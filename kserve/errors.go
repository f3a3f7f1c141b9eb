package kserve

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/piccolo-serving/piccolo/gateway"
)

// HTTPStatus returns the HTTP status for err: 400, 404, 413, 429, 504, 503 or 502
// (502 for anything not recognised: a failure somewhere behind the gateway).
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, gateway.ErrBadInput):
		return http.StatusBadRequest
	case errors.Is(err, gateway.ErrUnknownSession):
		return http.StatusNotFound
	case errors.Is(err, gateway.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, gateway.ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, gateway.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, gateway.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, gateway.ErrCancelled):
		return 499 // client closed the request (nginx's convention)
	}
	return http.StatusBadGateway
}

// GRPCCode returns the gRPC status code for err.
func GRPCCode(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, gateway.ErrBadInput):
		return codes.InvalidArgument
	case errors.Is(err, gateway.ErrUnknownSession):
		return codes.NotFound
	case errors.Is(err, gateway.ErrTooLarge), errors.Is(err, gateway.ErrOverloaded):
		return codes.ResourceExhausted
	case errors.Is(err, gateway.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled), errors.Is(err, gateway.ErrCancelled):
		return codes.Canceled
	}
	return codes.Unavailable
}
