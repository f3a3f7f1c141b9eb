package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestGatewayTenantsFlag: `piccolo gateway --tenants FILE` over a sim
// backend: an infer request without a key is 401, with the tenant's key
// 200; a key added to the file is taken without a restart; an invalid file
// at start is refused naming the flag and what is wrong.
func TestGatewayTenantsFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tenants.yaml")
	write := func(s string) {
		if err := os.WriteFile(file+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("tenants:\n  - {name: a, keys: [" + sha256Hex("key-a") + "]}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sg := startSimGateway(t, ctx, detGatewayConfig, func(_ *backendOptions, o *gatewayOptions) { o.tenants = file })
	infer := func(key string) int {
		req, _ := http.NewRequest("POST", sg.url+"/v2/models/s/infer", strings.NewReader(`{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := infer(""); got != 401 {
		t.Errorf("no key: %d, want 401", got)
	}
	if got := infer("key-a"); got != 200 {
		t.Errorf("tenant a's key: %d, want 200", got)
	}
	write("tenants:\n  - {name: a, keys: [" + sha256Hex("key-a") + "]}\n  - {name: b, keys: [" + sha256Hex("key-b") + "]}\n")
	// The reload is the watcher's, on its own goroutine: wait for its effect.
	deadline := time.Now().Add(30 * time.Second)
	for infer("key-b") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("a key added to the tenants file is still refused after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tenants:\n  - {name: c, keys: [key-c]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfg, []byte(detGatewayConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &gatewayOptions{listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo", dispatch: "tc", maxBody: 1 << 20,
		logFmt: "json", drain: time.Second, tenants: bad, files: []string{cfg, writeBackendsFile(t, dir, "127.0.0.1:1")}}
	err := runGateway(ctx, o, nil)
	if err == nil || !strings.Contains(err.Error(), "--tenants") || !strings.Contains(err.Error(), "64 hex digits") {
		t.Errorf("an invalid tenants file: %v; want an error naming --tenants and the key's form", err)
	}
}
