package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const demoConfig = "../../configs/demo/paper-gpus.yaml"

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadgenTraceCommand(t *testing.T) {
	url := startInferServer(t)
	trace := writeFile(t, "arrivals.csv", "timestamp,model\n2024-03-01 12:00:00,a\n2024-03-01 12:00:00.1,a\n2024-03-01 12:00:00.2,b\n2024-03-01 12:00:00.4,a\n2024-03-01 12:00:01,a\n")
	// Skip 0.1 s, 4× faster: 4 sends within 0.25 s.
	out, err := runLoadgen(t, "--target", url, "--session", "s", "--arrival", "trace", "--trace", trace, "--skip", "100ms", "--speed", "4", "-o", "json", "-q")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var rep struct {
		Sent int64 `json:"sent"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Sent != 4 {
		t.Errorf("sent %d, want the trace's 4 arrivals after --skip", rep.Sent)
	}
	backwards := writeFile(t, "back.txt", "0\n1\n0.5\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arrival", "trace"}, "--arrival trace needs --trace FILE"},
		{[]string{"--arrival", "trace", "--trace", backwards}, "back.txt:3: value: 0.5 goes back 500ms from line 2"},
		{[]string{"--arrival", "trace", "--trace", trace, "--trace-column", "ts"}, `arrivals.csv:1: no column "ts" in the header; columns: timestamp, model`},
		{[]string{"--arrival", "trace", "--trace", trace, "--rate", "5"}, "--rate given with --arrival trace"},
		{[]string{"--arrival", "trace", "--trace", trace, "--speed", "0"}, "trace speed 0: must be a finite number > 0"},
		{[]string{"--arrival", "poisson", "--trace", trace, "--rate", "5"}, "needs --arrival trace"},
		{[]string{"--arrival", "poisson"}, "--rate not set"},
		{[]string{"--arrival", "mmpp", "--quiet-rate", "5"}, "burst rate 0 req/s: must be a finite number > 0"},
	} {
		_, err := runLoadgen(t, append([]string{"--target", url, "--session", "s", "-q"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loadgen %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

func TestSimulateMMPPAndTrace(t *testing.T) {
	out, err := runSimulate(t, "-c", demoConfig, "--arrival", "mmpp", "--burst-rate", "250", "--burst-length", "1s",
		"--quiet-rate", "25", "--quiet-length", "8s", "--duration", "60s", "-o", "json")
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	var rep struct {
		Arrival  string `json:"arrival"`
		Sessions []struct {
			Rate     float64 `json:"rate"`
			Requests int     `json:"requests"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Arrival != "mmpp" || len(rep.Sessions) != 1 || rep.Sessions[0].Rate != 50 || rep.Sessions[0].Requests == 0 {
		t.Errorf("arrival %q, sessions %+v; want mmpp at its mean 50 req/s", rep.Arrival, rep.Sessions)
	}
	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, "%g\n", float64(i)*0.02)
	}
	trace := writeFile(t, "offsets.txt", lines.String())
	out, err = runSimulate(t, "-c", demoConfig, "--arrival", "trace", "--trace", trace, "-o", "json")
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Sessions[0].Requests != 200 {
		t.Errorf("simulated %d requests, want the trace's 200 (its whole span without --duration)", rep.Sessions[0].Requests)
	}
	if _, err := runSimulate(t, "-c", demoConfig, "--arrival", "trace", "--trace", trace, "--trace-session", "nope"); err == nil ||
		!strings.Contains(err.Error(), `session "nope": not a planned session of the plan; planned: paper-chain`) {
		t.Errorf("unknown --trace-session: %v", err)
	}
}

// plan --trace prints the trace plan and, on stderr, the comparison with the
// mean-rate and peak plans.
func TestPlanTraceCommand(t *testing.T) {
	// Bursts: 40 req/s, with 1 s at 400 req/s every 10 s.
	var lines strings.Builder
	for s := range 60 {
		rate := 40
		if s%10 == 5 {
			rate = 400
		}
		for k := range rate {
			fmt.Fprintf(&lines, "%.6f\n", float64(s)+float64(k)/float64(rate))
		}
	}
	trace := writeFile(t, "bursts.txt", lines.String())
	out, err := run(t, "plan", "-c", demoConfig, "--trace", trace, "--attainment", "0.99")
	if err != nil {
		t.Fatalf("plan --trace: %v\n%s", err, out)
	}
	for _, want := range []string{"session paper-chain", "trace: session paper-chain, 4560 requests", "mean rate", "trace (chosen)", "peak"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arrival", "gamma", "--cv2", "16"}, "--arrival gamma needs --duration"},
		{[]string{"--trace", trace, "--trace-session", "x"}, `trace session "x": not in the config; sessions: paper-chain`},
		{[]string{"--trace", trace, "--attainment", "2"}, "attainment target 2: must be in (0, 1]"},
	} {
		_, err := run(t, append([]string{"plan", "-c", demoConfig}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("plan %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
