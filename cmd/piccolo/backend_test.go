package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// TestBackendServesAndDrains boots `piccolo backend` from config text on
// loopback, preloads a model, runs a batch through the real client and stops it.
func TestBackendServesAndDrains(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "profiles.yaml")
	if err := os.WriteFile(cfgPath, []byte(`
hardware:
  - {name: v100, price: 3.06}
profiles:
  - model: resnet50
    hardware: v100
    entries:
      - {batch: 4, concurrency: 2, duration: 5ms}
  - model: ssd
    hardware: v100
    entries:
      - {batch: 2, concurrency: 1, duration: 5ms}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		models: []string{"resnet50"}, logFmt: "json", drain: 5 * time.Second}
	addr, done := startBackend(t, ctx, o)
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ready, err := c.Ready(ctx, "resnet50"); err != nil || !ready {
		t.Fatalf("preloaded resnet50 ready = %v, %v", ready, err)
	}
	if ready, _ := c.Ready(ctx, "ssd"); ready {
		t.Fatal("ssd ready without being loaded")
	}
	items := [][]api.Tensor{
		{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: []byte{0, 0, 128, 63}}},
		{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: []byte{0, 0, 0, 64}}},
	}
	out, err := c.Infer(ctx, "resnet50", items)
	if err != nil || len(out) != 2 {
		t.Fatalf("infer: %v, %v", out, err)
	}
	cancel()
	waitBackendStopped(t, done)
}

func TestBackendFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware: [{name: t4, price: 1}, {name: v100, price: 3}]\nprofiles: [{model: m, hardware: t4, entries: [{batch: 1, concurrency: 1, duration: 1ms}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    backendOptions
		says string
	}{
		{"no hardware", backendOptions{files: []string{cfgPath}, executor: "sim", logFmt: "json"}, "--hardware is required"},
		{"no config", backendOptions{hardware: "t4", executor: "sim", logFmt: "json"}, "no config"},
		{"unknown executor", backendOptions{hardware: "t4", files: []string{cfgPath}, executor: "tpu", logFmt: "json"}, "allowed: builtin, ocr, onnx, sim"},
		{"onnx with no models", backendOptions{hardware: "cpu-1t", executor: "onnx", logFmt: "json", ortLib: "/x/libonnxruntime.so.1", modelDir: t.TempDir(), threads: 1}, "has no .onnx file"},
		{"onnx with no threads", backendOptions{hardware: "cpu-1t", executor: "onnx", logFmt: "json", threads: 0}, "--intra-op-threads 0"},
		{"no profiles for hardware", backendOptions{hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json"}, "no profiles for hardware"},
		{"unknown preload", backendOptions{hardware: "t4", files: []string{cfgPath}, executor: "sim", logFmt: "json", models: []string{"x"}}, "unknown model"},
		{"bad listen", backendOptions{hardware: "t4", files: []string{cfgPath}, executor: "sim", logFmt: "json", listen: "nope"}, "--listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runBackend(context.Background(), &tc.o, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}
