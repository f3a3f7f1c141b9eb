package backends

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// The gateway's credential towards its backends: a shared token (`piccolo
// gateway --backend-token`, `piccolo backend --admin-token`, both also from
// $PICCOLO_BACKEND_TOKEN) sent as "authorization: Bearer <token>" on every
// call. A backend started with one refuses model load and unload and its
// /admin/faults without it; inference and health stay open to whoever
// reaches the port (its network, or --tls-client-ca, keeps them the
// gateway's). Over plain text the token crosses the network in clear: use
// TLS between gateway and backends where that network is shared.

// tokenCreds sends the token on every call (grpc.PerRPCCredentials).
type tokenCreds struct{ header map[string]string }

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return c.header, nil
}

// RequireTransportSecurity is false: the token also goes over plain text
// (see above).
func (tokenCreds) RequireTransportSecurity() bool { return false }

// TokenDialOption returns the dial option that sends token on every call of
// a client; nil for an empty token (grpc-go takes no nil option: add it only
// when it is not nil).
func TokenDialOption(token string) grpc.DialOption {
	if token == "" {
		return nil
	}
	return grpc.WithPerRPCCredentials(tokenCreds{header: map[string]string{"authorization": "Bearer " + token}})
}

// tokenChecker compares a presented bearer token with the expected one in
// constant time (both hashed, so the length does not leak either).
type tokenChecker [sha256.Size]byte

func newTokenChecker(token string) tokenChecker { return sha256.Sum256([]byte(token)) }

// ok reads "Bearer <token>" (the scheme in any case, RFC 7235 §2.1).
func (t *tokenChecker) ok(header string) bool {
	const scheme = "bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(header[len(scheme):])))
	return subtle.ConstantTimeCompare(got[:], t[:]) == 1
}

// adminMethods are the calls that change what a backend serves.
var adminMethods = map[string]bool{
	"/" + inference.GRPCInferenceService_ServiceDesc.ServiceName + "/RepositoryModelLoad":   true,
	"/" + inference.GRPCInferenceService_ServiceDesc.ServiceName + "/RepositoryModelUnload": true,
}

// RequireToken returns the server option under which model load and unload
// need token (UNAUTHENTICATED without it); nil for an empty token (add it
// only when it is not nil).
func RequireToken(token string) grpc.ServerOption {
	if token == "" {
		return nil
	}
	t := newTokenChecker(token)
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if adminMethods[info.FullMethod] {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("authorization"); len(v) != 1 || !t.ok(v[0]) {
				return nil, status.Error(codes.Unauthenticated, "model load and unload need the gateway's token: authorization: Bearer <token> (--backend-token)")
			}
		}
		return h(ctx, req)
	})
}

// RequireTokenHTTP wraps an admin HTTP handler (/admin/faults) so that it
// needs token (401 without it); h itself for an empty token.
func RequireTokenHTTP(token string, h http.HandlerFunc) http.HandlerFunc {
	if token == "" {
		return h
	}
	t := newTokenChecker(token)
	return func(w http.ResponseWriter, r *http.Request) {
		if !t.ok(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="piccolo-backend"`)
			http.Error(w, "unauthorized: send the backend's admin token as Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}
