package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGatewayCalibrationPersists: a gateway with --calibration-file measures
// its batches (piccolo_calibration_* on /metrics), writes the file on
// shutdown, and a second gateway started on the same file serves the
// measured series before its first request: a restart does not forget.
func TestGatewayCalibrationPersists(t *testing.T) {
	calFile := filepath.Join(t.TempDir(), "calibration.json")
	body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	samples := regexp.MustCompile(`(?m)^piccolo_calibration_samples\{[^}]*device="gpu-0"[^}]*model="det"[^}]*\} (\d+)`)
	scrape := func(url string) string {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	edit := func(_ *backendOptions, o *gatewayOptions) { o.calibrate, o.calFile = true, calFile }

	ctx, cancel := context.WithCancel(context.Background())
	sg := startSimGateway(t, ctx, detGatewayConfig, edit)
	for range 12 {
		resp, err := http.Post(sg.url+"/v2/models/s/infer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("infer: %d", resp.StatusCode)
		}
	}
	if m := samples.FindStringSubmatch(scrape(sg.url)); m == nil || m[1] == "0" {
		t.Fatalf("no calibration series for det on gpu-0 after 12 requests:\n%s", grepLines(scrape(sg.url), "piccolo_calibration"))
	}
	cancel()
	select {
	case <-sg.done:
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop")
	}
	data, err := os.ReadFile(calFile)
	if err != nil {
		t.Fatalf("calibration file not written on shutdown: %v", err)
	}
	var f struct {
		Series []struct {
			Model, Device string
			Micros        []int64 `json:"durations_us"`
		}
	}
	if err := json.Unmarshal(data, &f); err != nil || len(f.Series) == 0 || f.Series[0].Model != "det" || len(f.Series[0].Micros) == 0 {
		t.Fatalf("calibration file %s: %v", data, err)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	sg2 := startSimGateway(t, ctx2, detGatewayConfig, edit)
	if m := samples.FindStringSubmatch(scrape(sg2.url)); m == nil || m[1] == "0" {
		t.Errorf("restarted gateway forgot the calibration:\n%s", grepLines(scrape(sg2.url), "piccolo_calibration"))
	}
}
