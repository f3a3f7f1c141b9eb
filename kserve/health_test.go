package kserve

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// TestHealthFollowsReady: the gRPC health service, ServerReady and HTTP
// /v2/health/ready tell one readiness fact: SERVING / true / 200 while
// ready, NOT_SERVING / false / 503 after SetReady(false) (the drain), and a
// Health/Watch stream sees the change.
func TestHealthFollowsReady(t *testing.T) {
	ts := startServers(t, 4096)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := ts.server.NewGRPCServer()
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	check := func(want healthpb.HealthCheckResponse_ServingStatus, wantReady bool, wantHTTP int) {
		t.Helper()
		for _, svc := range []string{"", HealthService} {
			resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != want {
				t.Errorf("Health/Check %q = %v, %v; want %v", svc, resp.GetStatus(), err, want)
			}
		}
		r, err := inference.NewGRPCInferenceServiceClient(conn).ServerReady(ctx, &inference.ServerReadyRequest{})
		if err != nil || r.GetReady() != wantReady {
			t.Errorf("ServerReady = %v, %v; want %v", r.GetReady(), err, wantReady)
		}
		if status, _ := testharness.HTTPDo(t, "GET", ts.url+"/v2/health/ready", ""); status != wantHTTP {
			t.Errorf("GET /v2/health/ready = %d, want %d", status, wantHTTP)
		}
	}
	check(healthpb.HealthCheckResponse_SERVING, true, 200)
	watch, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: HealthService})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Watch first = %v, %v; want SERVING", first.GetStatus(), err)
	}
	ts.server.SetReady(false)
	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Health/Watch after SetReady(false) = %v, %v; want NOT_SERVING", next.GetStatus(), err)
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING, false, 503)
	ts.server.SetReady(true)
	check(healthpb.HealthCheckResponse_SERVING, true, 200)

	// Reflection lists what grpcurl shows without a .proto.
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		listed[s.GetName()] = true
	}
	for _, want := range []string{HealthService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !listed[want] {
			t.Errorf("reflection lists %v; missing %s", listed, want)
		}
	}
}
