package kserve

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/tenants"
)

// The headers an HTTP client sends its API key in (ServerOptions.Tenants).
const (
	HeaderAuthorization = "Authorization"
	HeaderAPIKey        = "X-API-Key"
)

// wwwAuthenticate is the challenge of a 401 (RFC 6750 §3).
const wwwAuthenticate = `Bearer realm="piccolo"`

// identifyHTTP returns the request's tenant, nil with true when tenants are
// off; it answers 401 and returns false for a missing or unknown key.
func (s *Server) identifyHTTP(ctx *fasthttp.RequestCtx) (*tenants.Tenant, bool) {
	if s.opts.Tenants == nil {
		return nil, true
	}
	key := tenants.KeyFromAuthorization(ctx.Request.Header.Peek(HeaderAuthorization))
	if key == nil {
		key = ctx.Request.Header.Peek(HeaderAPIKey)
	}
	tn, err := s.opts.Tenants.Identify(key)
	if err != nil {
		s.fail(ctx, "", "", err)
		return nil, false
	}
	return tn, true
}

// identifyGRPC is identifyHTTP for gRPC: the key from metadata authorization
// (Bearer) or x-api-key; nil, nil when tenants are off.
func (s *Server) identifyGRPC(ctx context.Context) (*tenants.Tenant, error) {
	if s.opts.Tenants == nil {
		return nil, nil
	}
	var key []byte
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		if key = tenants.KeyFromAuthorization([]byte(v)); key != nil {
			break
		}
	}
	if key == nil {
		if v := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(v) > 0 {
			key = []byte(v[0])
		}
	}
	return s.opts.Tenants.Identify(key)
}

// allowPriority refuses a request asking for a priority class above its
// tenant's; a priority PriorityClass refuses is left for the DAGRunner to
// refuse with its own message.
func allowPriority(tn *tenants.Tenant, priority int64) error {
	class, err := gateway.PriorityClass(priority)
	if err != nil {
		return nil
	}
	return tn.AllowClass(class)
}

// refusalHeaders sets what a tenant refusal adds to an HTTP answer: the
// challenge of a 401, the Retry-After of a 429. It reports whether err was
// one.
func refusalHeaders(ctx *fasthttp.RequestCtx, err error) bool {
	var r *tenants.Refusal
	if !errors.As(err, &r) {
		return false
	}
	switch {
	case errors.Is(err, tenants.ErrUnauthenticated):
		ctx.Response.Header.Set("WWW-Authenticate", wwwAuthenticate)
	case errors.Is(err, tenants.ErrLimited):
		ctx.Response.Header.Set("Retry-After", r.RetryAfterHeader())
	}
	return true
}

// grpcRefusalHeader sends a tenant's 429 Retry-After as the response
// header retry-after (seconds), as HTTP does.
func grpcRefusalHeader(ctx context.Context, err error) {
	var r *tenants.Refusal
	if errors.As(err, &r) && r.RetryAfter > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", r.RetryAfterHeader()))
	}
}
