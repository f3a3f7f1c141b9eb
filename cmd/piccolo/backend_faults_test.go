package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/process"
)

// TestBackendFaults boots `piccolo backend --fault fail=1`, sees every call
// fail INTERNAL, reads the fault from /admin/faults and /metrics, clears it
// with DELETE and sees the backend serve again.
func TestBackendFaults(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware: [{name: v100, price: 3}]\nprofiles: [{model: m, hardware: v100, entries: [{batch: 2, concurrency: 1, duration: 2ms}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metricsAddr := freeAddr(t)
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", faultOn: true,
		models: []string{"m"}, logFmt: "json", drain: 5 * time.Second, metrics: metricsAddr, faults: []string{"fail=1"}}
	addr, done := startBackend(t, ctx, o)
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	items := [][]api.Tensor{{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: []byte{0, 0, 128, 63}}}}
	if _, err := c.Infer(ctx, "m", items); !errors.Is(err, backends.ErrBackendFailed) || backends.IsTransport(err) {
		t.Fatalf("under --fault fail=1: %v; want ErrBackendFailed (INTERNAL)", err)
	}
	admin := "http://" + metricsAddr + process.FaultsPath
	do := func(method, url string) string {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
		return string(b)
	}
	if got := do(http.MethodGet, admin); !strings.Contains(got, `"fail":1`) {
		t.Errorf("GET %s = %s; want fail 1", process.FaultsPath, got)
	}
	if got := do(http.MethodGet, "http://"+metricsAddr+"/metrics"); !strings.Contains(got, `piccolo_backend_fault{kind="fail"} 1`) {
		t.Errorf("/metrics lacks piccolo_backend_fault{kind=\"fail\"} 1:\n%s", grepLines(got, "piccolo_backend_fault"))
	}
	do(http.MethodDelete, admin)
	if _, err := c.Infer(ctx, "m", items); err != nil {
		t.Fatalf("after DELETE %s: %v", process.FaultsPath, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestBackendFaultFlagErrors(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware: [{name: t4, price: 1}]\nprofiles: [{model: m, hardware: t4, entries: [{batch: 1, concurrency: 1, duration: 1ms}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ fault, says string }{
		{"crash", `--fault: faults: "crash" is not a fault; allowed: refuse, reset, hang, slow=K`},
		{"slow=0.5", "want a factor 1 ≤ k"},
		{"fail=2", "want a share 0 ≤ p ≤ 1"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			o := &backendOptions{hardware: "t4", files: []string{cfgPath}, executor: "sim", logFmt: "json", listen: "127.0.0.1:0", faultOn: true, faults: []string{tc.fault}}
			err := runBackend(context.Background(), o, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

// TestFaultInjectionIsOffByDefault: a backend started without
// --fault-injection refuses --fault, naming the flag, and does not serve
// /admin/faults (404), so nobody who reaches it can make it misbehave.
func TestFaultInjectionIsOffByDefault(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware: [{name: v100, price: 3}]\nprofiles: [{model: m, hardware: v100, entries: [{batch: 2, concurrency: 1, duration: 2ms}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refused := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json", faults: []string{"hang"}}
	if err := runBackend(ctx, refused, nil); err == nil || !strings.Contains(err.Error(), "--fault-injection") {
		t.Fatalf("--fault without --fault-injection: %v; want an error naming --fault-injection", err)
	}
	metricsAddr := freeAddr(t)
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		models: []string{"m"}, logFmt: "json", drain: time.Second, metrics: metricsAddr}
	startBackend(t, ctx, o)
	for _, method := range []string{"GET", "PUT"} {
		req, _ := http.NewRequest(method, "http://"+metricsAddr+process.FaultsPath, strings.NewReader(`{"hang": true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("%s %s without --fault-injection: %d; want 404", method, process.FaultsPath, resp.StatusCode)
		}
	}
}

// TestBackendTokenGuardsAdminCalls: a backend started with --admin-token
// loads and unloads models and serves /admin/faults only for a caller that
// sends the token; a gateway with --backend-token (the same) loads its plan's
// models there and serves.
func TestBackendTokenGuardsAdminCalls(t *testing.T) {
	const token = "gw-secret"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cancelConfig, "duration: 1s", "duration: 5ms")), 0o644); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		logFmt: "json", drain: time.Second, metrics: metricsAddr, faultOn: true, token: token})
	anon, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Load(ctx, "m", 0, 0); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("load without the token: %v; want UNAUTHENTICATED", err)
	}
	for _, auth := range []string{"", "Bearer nope", "bearer " + token} {
		req, _ := http.NewRequest("GET", "http://"+metricsAddr+process.FaultsPath, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 401}[auth == "bearer "+token]; resp.StatusCode != want {
			t.Errorf("GET %s with %q: %d; want %d", process.FaultsPath, auth, resp.StatusCode, want)
		}
	}
	bePath := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(bePath, fmt.Appendf(nil, "backends:\n  - {id: gpu-0, address: %q, hardware: v100}\n", addr), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr, _, _ := startGatewayAddrs(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, backendToken: token})
	resp, err := http.Post("http://"+httpAddr+"/v2/models/one/infer", "application/json", strings.NewReader(cancelBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("infer through a gateway with --backend-token: %d; want 200", resp.StatusCode)
	}
}
