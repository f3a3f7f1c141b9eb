package loadgen

// kind is the outcome of one request. The zero value means "no outcome yet".
type kind uint8

const (
	kindPending kind = iota
	kindOK
	kindOverloaded
	kindDeadline
	kindBadRequest
	kindNotFound
	kindUnauthorized
	kindServerError
	kindUnavailable
	kindUnexpected
	kindTimeout
	kindTransport
	kindDropped
	kindCanceled
	numKinds
)

// kindWords are the error kinds as reports name them.
var kindWords = [numKinds]string{
	kindPending:      "pending",
	kindOK:           "ok",
	kindOverloaded:   "rejected: overloaded", // HTTP 429, gRPC RESOURCE_EXHAUSTED
	kindDeadline:     "deadline",             // HTTP 504, gRPC DEADLINE_EXCEEDED from the server
	kindBadRequest:   "bad request",          // other HTTP 4xx, gRPC INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
	kindNotFound:     "not found",            // HTTP 404, gRPC NOT_FOUND: unknown session
	kindUnauthorized: "unauthorized",         // HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED
	kindServerError:  "server error",         // other HTTP 5xx, gRPC INTERNAL, UNKNOWN, UNIMPLEMENTED, ...
	kindUnavailable:  "unavailable",          // HTTP 503, gRPC UNAVAILABLE
	kindUnexpected:   "unexpected status",    // HTTP 1xx/3xx
	kindTimeout:      "timeout",              // no reply within --timeout, or still outstanding at the end of --drain
	kindTransport:    "transport",            // connection refused, reset, malformed reply
	kindDropped:      "dropped: client overload",
	kindCanceled:     "canceled", // the run was interrupted
}

func (k kind) String() string {
	if k < numKinds {
		return kindWords[k]
	}
	return "unknown"
}

// replied reports whether the outcome is a reply the server sent.
func (k kind) replied() bool {
	return k >= kindOK && k <= kindUnexpected
}

// httpKind maps an HTTP status code to an outcome.
func httpKind(status int) kind {
	switch {
	case status >= 200 && status < 300:
		return kindOK
	case status == 429:
		return kindOverloaded
	case status == 504:
		return kindDeadline
	case status == 503:
		return kindUnavailable
	case status == 404:
		return kindNotFound
	case status == 401 || status == 403:
		return kindUnauthorized
	case status == 408:
		return kindTimeout
	case status >= 400 && status < 500:
		return kindBadRequest
	case status >= 500:
		return kindServerError
	}
	return kindUnexpected
}
