package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// anyofConfig: two variants of a model race (join: anyof) before pick; the
// slow one (2 s a batch) alone could not meet the 1 s SLO, so a gateway that
// waited for both parents would answer no request in time. The fast branch
// runs batches of 1, so a lone request is sent at once (no wait for
// batch-mates). The slow variant runs on a backend of its own (t4): on one
// device the gateway would queue the fast batches behind its 2 s ones.
const anyofConfig = `
hardware:
  - {name: v100, price: 1}
  - {name: t4, price: 1}
profiles:
  - model: quick
    hardware: v100
    entries: [{batch: 1, duration: 10ms}]
  - model: sluggish
    hardware: t4
    entries: [{batch: 8, duration: 2s}]
  - model: pick
    hardware: v100
    entries: [{batch: 1, duration: 5ms}]
sessions:
  - name: race
    slo: 1s
    modules:
      - {name: fast, model: quick, rate: 5}
      - {name: slow, model: sluggish, rate: 5}
      - {name: pick, model: pick, rate: 5, after: [slow, fast], join: anyof}
`

// TestGatewayAnyOfLive: a real gateway over a real sim backend on loopback
// answers every request of an anyof session on the fast branch, within the
// SLO the slow branch alone misses, and reports the slow branch as not run.
func TestGatewayAnyOfLive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "p.yaml", Data: []byte(anyofConfig)})
	if err != nil {
		t.Fatal(err)
	}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for _, hw := range []string{"v100", "t4"} {
		ex, err := sim.New(hw, cfg.Profiles, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := testharness.ServeBackend(t, ex)
		fmt.Fprintf(&bl, "  - {id: %s-0, address: %q, hardware: %s}\n", hw, addr, hw)
	}
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(anyofConfig+bl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	url, _ := startGateway(t, ctx, &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second})
	for i := range 8 {
		code, body := testharness.HTTPDo(t, http.MethodPost, url+"/v2/models/race/infer", inferBody)
		if code != http.StatusOK {
			t.Fatalf("request %d: %d %v; want 200 (the fast branch answers in time)", i, code, body)
		}
		params, _ := body["parameters"].(map[string]any)
		var ran []string
		for k := range params {
			if strings.HasSuffix(k, ".total_ms") {
				ran = append(ran, strings.TrimSuffix(strings.TrimPrefix(k, "piccolo."), ".total_ms"))
			}
		}
		if params["piccolo.fast.total_ms"] == nil || params["piccolo.pick.total_ms"] == nil || params["piccolo.slow.total_ms"] != nil {
			t.Fatalf("request %d ran %v; want fast and pick, not slow (cut when fast won)", i, ran)
		}
		if e2e, _ := params["piccolo.e2e_ms"].(float64); e2e >= 1000 {
			t.Errorf("request %d took %.0f ms; the slow branch takes 2 s, the fast one tens of ms", i, e2e)
		}
	}
}
