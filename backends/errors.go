package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors callers branch on with errors.Is. The server maps them to gRPC
// codes once, in toStatus; the client maps gRPC codes back, in fromStatus. Errors
// from a canceled or expired ctx wrap context.Canceled or context.DeadlineExceeded.
var (
	// ErrUnknownModel: the backend cannot run this model at all (no profile on its
	// hardware, nothing in its repository). gRPC NOT_FOUND.
	ErrUnknownModel = errors.New("unknown model")
	// ErrModelNotLoaded: the backend knows the model but it is not loaded; load it
	// with RepositoryModelLoad first. gRPC FAILED_PRECONDITION.
	ErrModelNotLoaded = errors.New("model not loaded")
	// ErrInvalidInput: the request itself is wrong (datatype, shape, size, batch
	// larger than the loaded max batch, bad load parameter). gRPC INVALID_ARGUMENT.
	ErrInvalidInput = errors.New("invalid input")
	// ErrBackendUnavailable: the backend cannot be reached or is shutting down.
	// gRPC UNAVAILABLE. Retrying on another backend is safe.
	ErrBackendUnavailable = errors.New("backend unavailable")
	// ErrBackendOverloaded: the backend refused the work for lack of capacity.
	// gRPC RESOURCE_EXHAUSTED.
	ErrBackendOverloaded = errors.New("backend overloaded")
	// ErrBackendBadResponse: the backend answered, but not what the protocol and
	// the request promise (wrong output count, shape or size).
	ErrBackendBadResponse = errors.New("bad response from backend")
	// ErrBackendFailed: the backend reported an internal error (gRPC INTERNAL,
	// UNKNOWN, UNIMPLEMENTED and every other code).
	ErrBackendFailed = errors.New("backend failed")
	// ErrNotSent: the call never reached the backend, because no connection to
	// it could be made (refused, unreachable, name not resolved). It comes
	// wrapped together with ErrBackendUnavailable; see NotExecuted.
	ErrNotSent = errors.New("call not sent")
)

// dialFailed is how grpc-go (v1.85) words every failure to connect that fails a
// call before it is sent: the picker's error carries the transport's
// "connection error: desc = \"transport: Error while dialing: ...\"".
// TestNotExecuted locks the wording against the gRPC version in go.mod.
const dialFailed = "Error while dialing"

// NotExecuted reports whether err says the backend never received the call, so
// it certainly did not run the batch: retrying it anywhere cannot run it twice.
// A refused or unreachable backend gives true. A connection cut while the call
// ran (reset), a deadline, or any answer of the backend (even UNAVAILABLE from
// a draining server) give false: the batch may have run.
func NotExecuted(err error) bool { return errors.Is(err, ErrNotSent) }

// IsTransport reports whether err is a failure to reach the backend or to keep
// the connection (refused, reset, unreachable) or a backend that says it is
// unavailable (gRPC UNAVAILABLE), as opposed to an answer about the request or
// the model (ErrInvalidInput, ErrBackendFailed, ...) or ctx's error. Trying
// another backend is the remedy; NotExecuted tells whether the batch may have
// run here.
func IsTransport(err error) bool { return errors.Is(err, ErrBackendUnavailable) }

// toStatus maps an error of an executor or of request validation to a gRPC
// status error with a message that names what was wrong.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var code codes.Code
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, ErrInvalidInput):
		code = codes.InvalidArgument
	case errors.Is(err, ErrUnknownModel):
		code = codes.NotFound
	case errors.Is(err, ErrModelNotLoaded):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrHeldMissing):
		code = codes.Aborted
	case errors.Is(err, ErrBackendOverloaded):
		code = codes.ResourceExhausted
	case errors.Is(err, ErrBackendUnavailable):
		code = codes.Unavailable
	default:
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}

// fromStatus maps an error returned by a gRPC call to the backend at addr into
// an error wrapping the matching sentinel (and ctx's error when ctx is done),
// keeping the backend's message.
func fromStatus(ctx context.Context, addr, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("backend %s: %s: %w", addr, op, ctxErr)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("backend %s: %s: %w: %v", addr, op, ErrBackendFailed, err)
	}
	var sentinel error
	switch st.Code() {
	case codes.DeadlineExceeded:
		sentinel = context.DeadlineExceeded
	case codes.Canceled:
		sentinel = context.Canceled
	case codes.InvalidArgument, codes.OutOfRange:
		sentinel = ErrInvalidInput
	case codes.NotFound:
		sentinel = ErrUnknownModel
	case codes.FailedPrecondition:
		sentinel = ErrModelNotLoaded
	case codes.Aborted:
		sentinel = ErrHeldMissing
	case codes.Unavailable:
		sentinel = ErrBackendUnavailable
	case codes.ResourceExhausted:
		sentinel = ErrBackendOverloaded
	default:
		sentinel = ErrBackendFailed
	}
	if st.Code() == codes.Unavailable && strings.Contains(st.Message(), dialFailed) {
		return fmt.Errorf("backend %s: %s: %w, %w (%s: %s)", addr, op, sentinel, ErrNotSent, st.Code(), st.Message())
	}
	return fmt.Errorf("backend %s: %s: %w (%s: %s)", addr, op, sentinel, st.Code(), st.Message())
}
