package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// startInferServer serves POST /v2/models/{s}/infer (status 200, or 429 for
// every third request) and GET /v2/models/{s} with slo_ms 500, on 127.0.0.1:0.
func startInferServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if ctx.IsGet() {
			ctx.SetBodyString(`{"name":"s","inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],"outputs":[],"parameters":{"slo_ms":500}}`)
			return
		}
		if strings.HasSuffix(string(ctx.Path()), "/infer") && n.Add(1)%3 == 0 {
			ctx.Error(`{"error":"overloaded"}`, fasthttp.StatusTooManyRequests)
			return
		}
		ctx.SetBodyString(`{"outputs":[]}`)
	}}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func runLoadgen(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"loadgen"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestLoadgenCommandJSONAndPlot(t *testing.T) {
	url := startInferServer(t)
	plot := filepath.Join(t.TempDir(), "cdf.png")
	out, err := runLoadgen(t, "--target", url, "--session", "s", "--rate", "100", "--arrival", "constant",
		"--duration", "300ms", "-o", "json", "--plot", plot, "--quiet")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var rep struct {
		Sent          int64            `json:"sent"`
		OK            int64            `json:"ok"`
		Errors        map[string]int64 `json:"errors"`
		SLOMs         *float64         `json:"slo_ms"`
		SLOAttainment *float64         `json:"slo_attainment"`
		P99Ms         float64          `json:"p99_ms"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	var errs int64
	for _, c := range rep.Errors {
		errs += c
	}
	if rep.Sent != 30 || rep.OK+errs != 30 || rep.OK == 0 || rep.Errors["rejected: overloaded"] == 0 {
		t.Errorf("sent %d ok %d errors %v; want 30 sent, some ok, some rejected", rep.Sent, rep.OK, rep.Errors)
	}
	if rep.SLOMs == nil || *rep.SLOMs != 500 || rep.SLOAttainment == nil {
		t.Errorf("slo_ms %v attainment %v; want 500 from the metadata", rep.SLOMs, rep.SLOAttainment)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot did not write a PNG: %v", err)
	}
}

func TestLoadgenCommandTableAndErrors(t *testing.T) {
	url := startInferServer(t)
	out, err := runLoadgen(t, "--target", url, "--session", "s", "--rate", "50", "--duration", "100ms", "--slo", "1s", "-q")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	for _, want := range []string{"sent", "SLO attainment", "p99.9", "goodput"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--session", "s", "--rate", "1"}, `"target" not set`},
		{[]string{"--target", url, "--session", "s", "--rate", "1", "-o", "xml"}, `-o "xml": allowed: table, json`},
		{[]string{"--target", url, "--session", "s", "--rate", "-1"}, "must be a finite number > 0"},
		{[]string{"--target", url, "--session", "s", "--rate", "1", "--arrival", "burst"}, `unknown arrival process "burst"`},
		{[]string{"--target", url, "--session", "s", "--rate", "1", "--input", "/nonexistent.json"}, "no such file"},
		{[]string{"--target", url, "--session", "s", "--rate", "1", "--max-inflight", "0"}, "--max-inflight 0"},
		{[]string{"--target", url, "--session", "s", "--rate", "1", "--drain", "0s"}, "--drain 0s: must be > 0"},
	} {
		_, err := runLoadgen(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loadgen %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
