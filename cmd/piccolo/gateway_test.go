package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/metrics"
)

// detGatewayConfig is one v100 model, det (30 ms at batch 1, 40 ms at batch 4),
// and session s (SLO 1 s, module d at 20 req/s): the config of the gateway's
// serve-and-drain and admin tests.
const detGatewayConfig = `
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 30ms}
      - {batch: 4, concurrency: 1, duration: 40ms}
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: d, model: det, rate: 20}
`

// TestGatewayServesAndDrains boots a `piccolo backend` and a `piccolo gateway`
// from config files on loopback, runs one request through both, and stops the
// gateway with a request in flight: the request must still be answered.
func TestGatewayServesAndDrains(t *testing.T) {
	dir := t.TempDir()
	profiles := filepath.Join(dir, "profiles.yaml")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(profiles, detGatewayConfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bo := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{profiles}, executor: "sim", logFmt: "json", drain: 5 * time.Second}
	backendAddr, _ := startBackend(t, ctx, bo)
	backendsFile := writeBackendsFile(t, dir, backendAddr)

	gctx, stop := context.WithCancel(ctx)
	defer stop()
	o := &gatewayOptions{files: []string{profiles, backendsFile}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: 5 * time.Second, door: true}
	url, gdone := startGateway(t, gctx, o)
	body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	post := func() (int, string) {
		resp, err := http.Post(url+"/v2/models/s/infer", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, b := post(); status != 200 || !strings.Contains(b, `"piccolo.d.compute_ms"`) {
		t.Fatalf("infer: %d %s", status, b)
	}
	inflight := make(chan string, 1)
	go func() {
		status, b := post()
		inflight <- fmt.Sprint(status, " ", b)
	}()
	// Stop once the gateway holds the request (an item outstanding in its
	// module), not after a sleep: on a loaded host the request could still
	// be unsent, and the closed listener would refuse it. A request already
	// answered by then leaves the drain untested this run, and says so.
	deadline := time.Now().Add(10 * time.Second)
	for scrape(t, url, metrics.GatewayModuleOutstanding, `module="d"`) < 1 {
		if len(inflight) > 0 {
			t.Log("the request was answered before the gateway was seen holding it; the drain is not exercised this run")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never held the request")
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	select {
	case err := <-gdone:
		if err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not stop")
	}
	if got := <-inflight; !strings.HasPrefix(got, "200 ") {
		t.Errorf("request in flight at shutdown: %s, want 200", got)
	}

	t.Run("flag errors", func(t *testing.T) {
		for _, tc := range []struct {
			o    gatewayOptions
			want string
		}{
			{gatewayOptions{}, "no config given"},
			{gatewayOptions{files: []string{profiles}, dispatch: "fifo", maxBody: 1, logFmt: "json"}, `unknown dispatch policy "fifo"`},
			{gatewayOptions{files: []string{profiles}, dispatch: "tc", maxBody: 0, logFmt: "json"}, "--max-body 0"},
			{gatewayOptions{files: []string{profiles}, dispatch: "tc", maxBody: 1, logFmt: "json", door: true, doorOpts: kserve.OverloadOptions{TargetDelay: -time.Millisecond}}, "--overload-delay -1ms"},
			{gatewayOptions{files: []string{profiles}, dispatch: "tc", maxBody: 1, logFmt: "json", listen: ":1", grpcListen: ":1"}, "need their own ports"},
			{gatewayOptions{files: []string{profiles}, dispatch: "tc", maxBody: 1, logFmt: "json", listen: ":1", grpcListen: ":2"}, "no backends"},
		} {
			err := runGateway(context.Background(), &tc.o, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("runGateway(%+v) = %v, want an error containing %q", tc.o, err, tc.want)
			}
		}
	})
}
