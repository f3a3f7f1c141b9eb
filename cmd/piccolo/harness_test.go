package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeBackendsFile writes dir/backends.yaml listing the backend at addr as
// gpu-0 of hardware v100 (static membership), and returns its path.
func writeBackendsFile(t testing.TB, dir, addr string) string {
	t.Helper()
	path := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "backends:\n  - {id: gpu-0, address: %q, hardware: v100}\n", addr), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBackend runs `piccolo backend` with o on a goroutine and returns its address
// once it serves, and the channel its result arrives on when ctx ends.
func startBackend(t testing.TB, ctx context.Context, o *backendOptions) (string, <-chan error) {
	t.Helper()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runBackend(ctx, o, func(a string) { addrs <- a }) }()
	select {
	case addr := <-addrs:
		return addr, done
	case err := <-done:
		t.Fatalf("backend exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("backend did not start")
	}
	return "", nil
}

// startGateway runs `piccolo gateway` with o on a goroutine and returns its HTTP URL
// once it serves, and the channel its result arrives on when ctx ends.
func startGateway(t testing.TB, ctx context.Context, o *gatewayOptions) (string, <-chan error) {
	t.Helper()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runGateway(ctx, o, func(h, _ string) { addrs <- h }) }()
	select {
	case h := <-addrs:
		return "http://" + h, done
	case err := <-done:
		t.Fatalf("gateway exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	return "", nil
}

// simGateway is a `piccolo backend` (executor sim, hardware v100) and a
// `piccolo gateway` over it, both in-process, from one config file.
type simGateway struct {
	url     string       // the gateway's HTTP base URL
	backend string       // the backend's gRPC address
	cfgPath string       // the config file both read (the gateway may watch it)
	done    <-chan error // the gateway's result once ctx ends
}

// startSimGateway writes configText to a file, starts a sim backend on it and
// a gateway over it and the backends file (piccolo policy, tc dispatch, 1 MiB
// bodies, slack 0.1, JSON logs, drain 1 s, after edit, which may be nil,
// changes the options), both running until ctx ends.
func startSimGateway(t *testing.T, ctx context.Context, configText string, edit func(*backendOptions, *gatewayOptions)) simGateway {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(configText), 0o644); err != nil {
		t.Fatal(err)
	}
	bo := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json", drain: time.Second}
	o := &gatewayOptions{listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo", dispatch: "tc", maxBody: 1 << 20,
		slack: 0.1, logFmt: "json", drain: time.Second}
	if edit != nil {
		edit(bo, o)
	}
	addr, _ := startBackend(t, ctx, bo)
	o.files = []string{cfgPath, writeBackendsFile(t, dir, addr)}
	url, done := startGateway(t, ctx, o)
	return simGateway{url: url, backend: addr, cfgPath: cfgPath, done: done}
}
