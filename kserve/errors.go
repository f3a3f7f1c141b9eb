package kserve

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/tenants"
)

// HTTPStatus returns the HTTP status for err: 400, 401, 403, 404, 413, 429,
// 500, 504, 503 or 502 (502 for anything not recognised: a failure somewhere
// behind the gateway).
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, tenants.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, tenants.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, tenants.ErrLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, gateway.ErrBadInput):
		return http.StatusBadRequest
	case errors.Is(err, gateway.ErrInternal):
		return http.StatusInternalServerError
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, gateway.ErrUnknownSession), errors.Is(err, errUnknownVersion):
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
	case errors.Is(err, tenants.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, tenants.ErrForbidden):
		return codes.PermissionDenied
	case errors.Is(err, tenants.ErrLimited):
		return codes.ResourceExhausted
	case errors.Is(err, gateway.ErrBadInput):
		return codes.InvalidArgument
	case errors.Is(err, gateway.ErrInternal):
		return codes.Internal
	case errors.Is(err, gateway.ErrUnknownSession), errors.Is(err, errUnknownVersion):
		return codes.NotFound
	case errors.Is(err, gateway.ErrTooLarge), errors.Is(err, gateway.ErrOverloaded), errors.Is(err, errBusy):
		return codes.ResourceExhausted
	case errors.Is(err, gateway.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled), errors.Is(err, gateway.ErrCancelled):
		return codes.Canceled
	}
	return codes.Unavailable
}

// publicMessage returns what a client is told of err, a failure of a request
// to session ("" outside the model routes): the message of an error made for
// the client (gateway.BadInput, gateway.Public: what was wrong with the request,
// what is allowed), else a stable message for err's class that names only
// the session. The error's chain (backend addresses, processes, Go errors
// from behind the gateway) goes to the log under the request id instead
// (logFailure), never to the client.
func (s *Server) publicMessage(err error, session string) string {
	if msg, ok := gateway.PublicMessage(err); ok {
		return msg
	}
	var r *tenants.Refusal
	if errors.As(err, &r) { // written for the client: the tenant and its limit
		return r.Error()
	}
	q := strconv.Quote(session)
	switch {
	case errors.Is(err, gateway.ErrUnknownSession):
		// No other session's name: a client learns only what it asked for
		// (the repository index lists what it may see).
		return "unknown session " + q
	case errors.Is(err, gateway.ErrInternal):
		if session == "" { // a panic caught before the route was read
			return "internal error: the gateway failed while serving the request; it is logged under the request id"
		}
		return "internal error: the gateway failed while serving a request to session " + q + "; it is logged under the request id"
	case errors.Is(err, gateway.ErrBadInput):
		return "bad input: a model of session " + q + " refused the request's inputs"
	case errors.Is(err, gateway.ErrTooLarge):
		return "request too large: the body is over the limit of " + strconv.Itoa(s.opts.MaxBodyBytes) + " bytes (--max-body)"
	case errors.Is(err, gateway.ErrOverloaded):
		return "overloaded: session " + q + " cannot answer within its deadline at the current load; retry later"
	case errors.Is(err, gateway.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded: session " + q + " did not answer within the request's deadline"
	case errors.Is(err, gateway.ErrUnavailable):
		return "unavailable: session " + q + " cannot be served now; retry later"
	case errors.Is(err, context.Canceled):
		return "cancelled: the client cancelled the request"
	}
	return "backend error: a backend of session " + q + " failed or answered something unusable"
}

// requestID returns the id a failure is reported and logged under: the
// request's own "id" when it has one, else one made here (unique within the
// process: a random prefix per Server and a counter). Only failures call it.
func (s *Server) requestID(given string) string {
	if given != "" {
		return given
	}
	return s.idPrefix + strconv.FormatUint(s.idSeq.Add(1), 10)
}

// errUnknownVersion is a model version a session does not have (HTTP 404,
// gRPC NOT_FOUND, as Triton answers).
var errUnknownVersion = errors.New("unknown version")

// SessionVersion is the one version every session has, as model metadata
// lists it.
const SessionVersion = "1"

// checkVersion refuses a version of session other than SessionVersion (""
// is no version: the default). An unknown session is refused first.
func (s *Server) checkVersion(session, version string) error {
	if version == "" || version == SessionVersion {
		return nil
	}
	if err := s.exec.CheckSession(session); err != nil {
		return err
	}
	return gateway.Public(errUnknownVersion, "%v %q of session %q; versions: %s", errUnknownVersion, version, session, SessionVersion)
}
