package main

import (
	"context"
	"testing"
	"time"
)

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
