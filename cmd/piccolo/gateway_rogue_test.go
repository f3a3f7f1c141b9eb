package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// TestGatewayRefusesRogueBackend: a gateway with --consul and
// --backend-token, one `piccolo backend` started with the same token
// (--admin-token) and a rogue gRPC server that registers itself in Consul
// as a backend, with the metadata a backend has but no credential, on the
// same agent. The gateway serves its requests on the good backend, lists
// only it (naming the rogue as refused), and the rogue receives no call at
// all.
func TestGatewayRefusesRogueBackend(t *testing.T) {
	agent := consultest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, 20.0), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rogue: any call to any method is counted (and refused).
	var calls atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rogue := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		calls.Add(1)
		return status.Error(codes.Unimplemented, "rogue")
	}))
	go rogue.Serve(lis)
	defer rogue.Stop()
	host, portText, _ := net.SplitHostPort(lis.Addr().String())
	port, _ := strconv.Atoi(portText)
	client, err := capi.NewClient(&capi.Config{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted first, a v100 with the session's model: what a placement would pick.
	if err := client.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "a-rogue", Name: membership.ServiceName, Address: host, Port: port,
		Tags: []string{"v100"}, Meta: map[string]string{membership.MetaHardware: "v100", membership.MetaPrice: "0.01", membership.MetaModels: "det"},
		Check: &capi.AgentServiceCheck{TCP: lis.Addr().String(), Interval: "1s", Status: capi.HealthPassing}}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bo := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json",
		drain: time.Second, metrics: "off", consul: agent.Addr(), id: "gpu-0", token: "tok"}
	startBackend(t, ctx, bo)
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, consul: agent.Addr(),
		schedule: true, adminToken: "admin", backendToken: "tok"}
	url, _ := startGateway(t, ctx, o)
	// 20 answered; on a loaded machine a request may miss the session's
	// 400 ms SLO (504) or be refused for it (429): those are not counted.
	served, sent := 0, 0
	for ; served < 20 && sent < 100; sent++ {
		resp, err := http.Post(url+"/v2/models/s/infer", "application/json", strings.NewReader(inferBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			served++
		case 429, 504:
		default:
			t.Fatalf("request %d: %d", sent, resp.StatusCode)
		}
	}
	if served < 20 {
		t.Fatalf("%d of %d requests answered", served, sent)
	}
	if st, body := adminDo(t, url, "GET", "/admin/backends", "admin", ""); st != 200 || !strings.Contains(body, `"gpu-0"`) || strings.Contains(body, `"id": "a-rogue"`) ||
		!strings.Contains(body, "lacks the backend credential") {
		t.Errorf("GET /admin/backends: %d %s; want gpu-0 the only backend, and a-rogue named as refused", st, body)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the rogue backend received %d calls, want none", n)
	}
}
