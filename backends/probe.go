package backends

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// Probe probes the backend: grpc.health.v1 Probe of the overall service
// (SERVING), or, on a server without the health service (UNIMPLEMENTED), the
// KServe v2 ServerReady. nil means the backend serves; the error otherwise
// names what failed (ErrBackendUnavailable for a transport failure or a
// backend not serving). It also resets the connection's reconnect backoff
// first, so a backend that came back is dialled at once, not after grpc-go's
// backoff (up to 120 s by default).
func (c *Client) Probe(ctx context.Context) error {
	c.conn.ResetConnectBackoff()
	r, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) == codes.Unimplemented {
		rr, err := c.stub.ServerReady(ctx, &inference.ServerReadyRequest{})
		if err != nil {
			return fromStatus(ctx, c.addr, "ServerReady", err)
		}
		if !rr.GetReady() {
			return fmt.Errorf("backend %s: ServerReady: not ready: %w", c.addr, ErrBackendUnavailable)
		}
		return nil
	}
	if err != nil {
		return fromStatus(ctx, c.addr, "health Check", err)
	}
	if s := r.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("backend %s: health Check: %s: %w", c.addr, s, ErrBackendUnavailable)
	}
	return nil
}
