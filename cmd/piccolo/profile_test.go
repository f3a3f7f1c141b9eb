package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// runProfile runs `piccolo profile args...` and returns its stdout and stderr.
func runProfile(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"profile"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// startProfileBackend boots `piccolo backend` (sim) from config text on
// 127.0.0.1:0 until the test ends and returns its address.
func startProfileBackend(t *testing.T, config string) string {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "backend.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // also when startBackend fails
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "t4", files: []string{cfgPath}, executor: "sim", logFmt: "json", drain: time.Second}
	addr, done := startBackend(t, ctx, o)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return addr
}

const profileBackendConfig = `
hardware:
  - {name: t4, price: 1}
profiles:
  - model: det
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 8ms}
      - {batch: 2, concurrency: 1, duration: 10ms}
      - {batch: 1, concurrency: 2, duration: 10ms}
      - {batch: 2, concurrency: 2, duration: 12ms}
`

// TestProfileCommand profiles a real `piccolo backend`, writes the YAML with -o
// and loads it back; the table goes to stderr.
func TestProfileCommand(t *testing.T) {
	addr := startProfileBackend(t, profileBackendConfig)
	outPath := filepath.Join(t.TempDir(), "det-t4.yaml")
	stdout, stderr, err := runProfile(t, "--target", addr, "--model", "det", "--hardware", "t4", "--price", "0.35",
		"--batches", "2,1", "--concurrency", "1,2", "--duration", "200ms", "--warmup", "1", "-o", outPath, "-q")
	if err != nil {
		t.Fatalf("profile: %v\n%s", err, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q; want nothing with -o", stdout)
	}
	for _, w := range []string{"p90 ms", "measured items/s", "d = p90"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr table lacks %q:\n%s", w, stderr)
		}
	}
	cfg, err := api.Load(outPath)
	if err != nil {
		data, _ := os.ReadFile(outPath)
		t.Fatalf("api.Load(%s): %v\n%s", outPath, err, data)
	}
	if h, ok := cfg.HardwareByName("t4"); !ok || h.Price != 0.35 {
		t.Errorf("hardware %+v; want t4 at 0.35", cfg.Hardware)
	}
	profs := cfg.ProfilesOf("det")
	if len(profs) != 1 || len(profs[0].Entries) != 4 {
		t.Fatalf("profiles %+v; want det with 4 entries", profs)
	}
	want := []struct {
		b, c int
		d    time.Duration
	}{{1, 1, 8 * time.Millisecond}, {2, 1, 10 * time.Millisecond}, {1, 2, 10 * time.Millisecond}, {2, 2, 12 * time.Millisecond}}
	for i, e := range profs[0].Entries {
		w := want[i]
		if e.Batch != w.b || e.Concurrency != w.c || e.Duration.D() < w.d || e.Duration.D() > 2*w.d+20*time.Millisecond {
			t.Errorf("entry %d: batch %d concurrency %d duration %v; want batch %d concurrency %d duration in [%v, %v]",
				i, e.Batch, e.Concurrency, e.Duration.D(), w.b, w.c, w.d, 2*w.d+20*time.Millisecond)
		}
	}

	// Without -o the YAML goes to stdout; without --price it holds profiles only.
	stdout, _, err = runProfile(t, "--target", addr, "--model", "det", "--hardware", "t4",
		"--batches", "1", "--duration", "50ms", "--warmup", "0", "-q")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "profiles:") || strings.Contains(stdout, "hardware:\n") || !strings.Contains(stdout, "{batch: 1, concurrency: 1, duration: ") {
		t.Errorf("stdout:\n%s\nwant profiles only, one entry a line", stdout)
	}
}

func TestProfileCommandErrors(t *testing.T) {
	addr := startProfileBackend(t, profileBackendConfig)
	base := []string{"--target", addr, "--model", "det", "--hardware", "t4", "--duration", "50ms", "--warmup", "0", "-q"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"bad batch token", append(base, "--batches", "1,2x,4"), []string{"--batches", `"2x"`}},
		{"zero concurrency", append(base, "--concurrency", "0"), []string{"--concurrency", `"0"`}},
		{"duplicate batch", append(base, "--batches", "1,1"), []string{"--batches", "twice"}},
		{"percentile", append(base, "--percentile", "0"), []string{"--percentile 0"}},
		{"duration", append(base, "--duration", "0s"), []string{"--duration 0s"}},
		{"negative price", append(base, "--price", "-1"), []string{"--price -1"}},
		{"missing model", []string{"--target", addr, "--hardware", "t4"}, []string{"model"}},
		{"unknown model", append(base, "--model", "ocr"), []string{`"ocr"`, "unknown model", "det"}},
		{"batch above max", append(base, "--batches", "1,2,16"), []string{"point batch 16, concurrency 1", "up to batch 2"}},
		{"missing input file", append(base, "--input", "/nonexistent/x.json"), []string{"/nonexistent/x.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := runProfile(t, tc.args...)
			if err == nil {
				t.Fatalf("no error; stdout:\n%s", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if stdout != "" {
				t.Errorf("stdout %q on error; want nothing", stdout)
			}
		})
	}

	// A failed run leaves no file behind at -o.
	outPath := filepath.Join(t.TempDir(), "p.yaml")
	if _, _, err := runProfile(t, append(base, "--batches", "1,16", "-o", outPath)...); err == nil {
		t.Fatal("batch 16: no error")
	}
	if _, err := os.Stat(outPath); !os.IsNotExist(err) {
		t.Errorf("-o file exists after a failed run (stat: %v)", err)
	}
}
