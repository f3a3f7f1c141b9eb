package backends_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// checkHealth asserts the health status of every service in svcs.
func checkHealth(t *testing.T, h healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus, svcs ...string) {
	t.Helper()
	for _, svc := range svcs {
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Health/Check %q: %v", svc, err)
		}
		if resp.GetStatus() != want {
			t.Fatalf("Health/Check %q = %v, want %v", svc, resp.GetStatus(), want)
		}
	}
}

// dial opens a plain gRPC connection to addr for the test.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestHealthFollowsServeAndDrain: NOT_SERVING before Serve, SERVING after,
// NOT_SERVING from Drain on (for good) while inference still answers.
func TestHealthFollowsServeAndDrain(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	h := healthpb.NewHealthClient(dial(t, b.addr))
	svcs := []string{"", backends.HealthService}
	if backends.HealthService != inference.GRPCInferenceService_ServiceDesc.ServiceName {
		t.Fatalf("HealthService %q is not the inference service's name %q", backends.HealthService, inference.GRPCInferenceService_ServiceDesc.ServiceName)
	}
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING, svcs...)
	b.server.Serve()
	checkHealth(t, h, healthpb.HealthCheckResponse_SERVING, svcs...)

	b.server.Drain()
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING, svcs...)
	if _, err := b.client.Infer(context.Background(), "m", [][]api.Tensor{item(1, 1)}); err != nil {
		t.Fatalf("infer while draining: %v (a draining backend still serves)", err)
	}
	b.server.Serve()
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING, svcs...)
}

// TestReflectionListsServices: server reflection names the inference and
// health services, as `grpcurl list` shows them.
func TestReflectionListsServices(t *testing.T) {
	b := startSim(t, sim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(dial(t, b.addr)).ServerReflectionInfo(ctx)
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
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"inference.GRPCInferenceService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v; missing %s", names, want)
		}
	}
}
