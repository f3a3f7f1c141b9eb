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
